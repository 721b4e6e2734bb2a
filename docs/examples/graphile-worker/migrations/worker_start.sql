insert into ${escapedWorkerSchema}._private_tasks as tasks (identifier) select unnest(array['outbox']::text[]) on conflict do nothing
