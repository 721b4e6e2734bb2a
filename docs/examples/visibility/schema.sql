-- A queue with a visibility timeout, as SQS or pgmq keep one: `vt` is when a message may be read
-- again — while it is being read, the reader's lease; after a failure, its retry time. A read
-- counts itself (`read_ct`) and hands out a receipt; a success deletes the message. `version`
-- moves on every write (the profile observes mark_failed by it).
CREATE TABLE messages (
    id       BIGINT  NOT NULL PRIMARY KEY,
    tenant   BIGINT  NOT NULL,
    state    TEXT    NOT NULL,
    read_ct  INTEGER NOT NULL DEFAULT 0,
    reader   BIGINT,
    receipt  BIGINT  NOT NULL DEFAULT 0,
    vt       BIGINT,
    error    TEXT,
    created  BIGINT  NOT NULL,
    version  BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX messages_visible ON messages (tenant, vt);
