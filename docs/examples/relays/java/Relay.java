// An outbox relay in Java, on JDBC (PostgreSQL's driver) and the RabbitMQ Java client (publisher
// confirms), for the queue of docs/examples/native (queue.jobs). It knows nothing of outbox-check
// but the contract's environment variables (docs/relays.md). Build and run:
//   javac -d classes -cp /usr/share/java/postgresql.jar:/usr/share/java/amqp-client.jar Relay.java
//   java -cp classes:/usr/share/java/postgresql.jar:/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar Relay [--flaw NAME]
//
// The correct relay claims through queue.claim() (owner, a fresh lock token, the attempt counted),
// publishes each job with its id as the message id and waits for the broker's confirm, then
// writes the outcome fenced on state, owner and token. --flaw NAME runs one of the mistakes of
// the designs outbox-check ships (relay.py's list; the same names).

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

public final class Relay {
    static final List<String> FLAWS =
        List.of("lease-batch", "attempts-at-ambiguous", "zero-row-success", "no-exhausted", "immediate-retry");
    static final String PICK = "SELECT d.id FROM queue.jobs AS d"
        + " WHERE d.tenant = ? AND d.state IN ('available', 'unknown', 'running')"
        + " AND (d.locked_until IS NULL OR d.locked_until <= now())"
        + " AND (d.run_at IS NULL OR d.run_at <= now())"
        + " AND d.attempt < d.max_attempts"
        + " ORDER BY coalesce(d.run_at, d.created), d.id LIMIT ? FOR UPDATE SKIP LOCKED";
    static final String CLAIM = "SELECT id, lock_token, attempt FROM queue.claim(?, ?, ?::interval, ?)";
    static final String CLAIM_UNCOUNTED = "UPDATE queue.jobs AS j SET state = 'running',"
        + " locked_until = now() + ?::interval, locked_by = ?, lock_token = j.lock_token + 1"
        + " WHERE j.id IN (" + PICK + ") RETURNING j.id, j.lock_token, j.attempt";
    static final String LEASE_BATCH = "UPDATE queue.jobs AS j SET state = 'running', locked_until = now() + ?::interval"
        + " WHERE j.id IN (" + PICK + ") RETURNING j.id, j.lock_token, j.attempt";
    static final String COMPLETE =
        "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, state = 'completed', finished = now()";
    static final String FAIL = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL, error = ?::queue.failure,"
        + " state = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE ?::queue.job_state END,"
        + " run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + ?::interval END";
    static final String FAIL_COUNTED = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL,"
        + " error = ?::queue.failure, attempt = attempt + 1,"
        + " state = CASE WHEN attempt + 1 >= max_attempts THEN 'dead'::queue.job_state ELSE ?::queue.job_state END,"
        + " run_at = CASE WHEN attempt + 1 >= max_attempts THEN run_at ELSE now() + ?::interval END";
    static final String FAIL_NEVER_ENDS = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL,"
        + " error = ?::queue.failure, state = ?::queue.job_state, run_at = now() + ?::interval";
    static final String FAIL_AT_ONCE = "UPDATE queue.jobs SET locked_until = NULL, locked_by = NULL,"
        + " error = ?::queue.failure,"
        + " state = CASE WHEN attempt >= max_attempts THEN 'dead'::queue.job_state ELSE ?::queue.job_state END,"
        + " run_at = CASE WHEN attempt >= max_attempts THEN run_at ELSE now() + ?::interval * 0 END";

    record Job(Object id, long token, int attempt) {}

    static String flaw;
    static String name;
    static int owner;
    static int tenant;
    static long leaseMs;
    static long baseMs;
    static long capMs;
    static int batch;
    static long pollMs;
    static volatile boolean stopping;

    static String need(Map<String, String> env, String key) {
        String value = env.get(key);
        if (value == null || value.isEmpty()) {
            System.err.println("Relay: " + key + " is not set (run me with outbox-check e2e --relay)");
            System.exit(2);
        }
        return value;
    }

    static void log(String text) {
        System.out.println(name + ": " + text);
        System.out.flush();
    }

    static String ms(long n) {
        return n + " milliseconds";
    }

    static long backoff(int attempt) {
        return Math.min(baseMs << Math.min(Math.max(attempt - 1, 0), 30), capMs);
    }

    static java.sql.Connection database(String url) throws InterruptedException {
        while (true) {
            try {
                java.sql.Connection db = DriverManager.getConnection(url);
                db.setAutoCommit(true);
                return db;
            } catch (SQLException e) {
                log("database: " + e.getMessage() + "; again in 100 ms");
                Thread.sleep(100);
            }
        }
    }

    static List<Job> claim(java.sql.Connection db) throws SQLException {
        PreparedStatement s;
        if ("lease-batch".equals(flaw)) {
            s = db.prepareStatement(LEASE_BATCH);
            s.setString(1, ms(leaseMs));
            s.setInt(2, tenant);
            s.setInt(3, batch);
        } else if ("attempts-at-ambiguous".equals(flaw)) {
            s = db.prepareStatement(CLAIM_UNCOUNTED);
            s.setString(1, ms(leaseMs));
            s.setInt(2, owner);
            s.setInt(3, tenant);
            s.setInt(4, batch);
        } else {
            s = db.prepareStatement(CLAIM);
            s.setInt(1, tenant);
            s.setInt(2, owner);
            s.setString(3, ms(leaseMs));
            s.setInt(4, batch);
        }
        List<Job> jobs = new ArrayList<>();
        try (s; ResultSet r = s.executeQuery()) {
            while (r.next()) {
                jobs.add(new Job(r.getObject(1), r.getLong(2), r.getInt(3)));
            }
        }
        return jobs;
    }

    static void write(java.sql.Connection db, String sql, List<Object> values, Job job) throws SQLException {
        boolean byId = "lease-batch".equals(flaw);
        String where = byId
            ? " WHERE id = ?"
            : " WHERE id = ? AND tenant = ? AND state = 'running' AND locked_by = ? AND lock_token = ?";
        try (PreparedStatement s = db.prepareStatement(sql + where)) {
            int i = 1;
            for (Object v : values) {
                s.setObject(i++, v);
            }
            s.setObject(i++, job.id());
            if (!byId) {
                s.setInt(i++, tenant);
                s.setInt(i++, owner);
                s.setLong(i, job.token());
            }
            int n = s.executeUpdate();
            if (n == 0 && !"zero-row-success".equals(flaw)) {
                log(job.id() + ": no longer mine (stale lease " + job.token() + "); left to its new holder");
            }
        }
    }

    static void failed(java.sql.Connection db, Job job, boolean refused) throws SQLException {
        String state = refused ? "available" : "unknown";
        String code = refused ? "rejected" : "timeout";
        String sql = FAIL;
        int attempt = job.attempt();
        if ("attempts-at-ambiguous".equals(flaw)) {
            sql = FAIL_COUNTED;
            attempt += 1;
        } else if ("no-exhausted".equals(flaw)) {
            sql = FAIL_NEVER_ENDS;
        } else if ("immediate-retry".equals(flaw)) {
            sql = FAIL_AT_ONCE;
        }
        write(db, sql, List.of(code, state, ms(backoff(attempt))), job);
    }

    /** Publishes with a confirm: 1 confirmed, 0 refused, -1 unknown (the connection went). */
    static int publish(Channel[] channel, ConnectionFactory factory, String queue, Job job) {
        try {
            if (channel[0] == null || !channel[0].isOpen()) {
                Connection connection = factory.newConnection();
                channel[0] = connection.createChannel();
                channel[0].confirmSelect();
            }
            AMQP.BasicProperties properties =
                new AMQP.BasicProperties.Builder().messageId(job.id().toString()).deliveryMode(2).build();
            channel[0].basicPublish("", queue, true, properties, ("job " + job.id()).getBytes());
            return channel[0].waitForConfirms(Math.max(leaseMs / 2, 100)) ? 1 : 0;
        } catch (Exception e) {
            log("broker: " + e);
            try {
                if (channel[0] != null) {
                    channel[0].getConnection().abort();
                }
            } catch (Exception ignored) {
                // gone already
            }
            channel[0] = null;
            return -1;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 2 && args[0].equals("--flaw") && FLAWS.contains(args[1])) {
            flaw = args[1];
        } else if (args.length != 0) {
            System.err.println("Relay: usage: Relay [--flaw " + String.join("|", FLAWS) + "]");
            System.exit(2);
        }
        Map<String, String> env = System.getenv();
        name = need(env, "OUTBOX_CHECK_RELAY_NAME");
        owner = Integer.parseInt(need(env, "OUTBOX_CHECK_RELAY_ID"));
        String jdbc = need(env, "OUTBOX_CHECK_JDBC_URL");
        String broker = need(env, "OUTBOX_CHECK_BROKER");
        if (!broker.equals("rabbitmq")) {
            System.err.println("Relay: speaks RabbitMQ only, not " + broker + " (outbox-check e2e --broker rabbitmq)");
            System.exit(2);
        }
        String brokerUrl = need(env, "OUTBOX_CHECK_BROKER_URL");
        String queue = need(env, "OUTBOX_CHECK_QUEUE");
        tenant = Integer.parseInt(env.getOrDefault("OUTBOX_CHECK_TENANT", "0"));
        leaseMs = Long.parseLong(env.getOrDefault("OUTBOX_CHECK_LEASE_MS", "1000"));
        baseMs = Long.parseLong(env.getOrDefault("OUTBOX_CHECK_BACKOFF_BASE_MS", "200"));
        capMs = Long.parseLong(env.getOrDefault("OUTBOX_CHECK_BACKOFF_CAP_MS", "1000"));
        batch = Integer.parseInt(env.getOrDefault("OUTBOX_CHECK_BATCH", "10"));
        pollMs = Long.parseLong(env.getOrDefault("OUTBOX_CHECK_POLL_MS", "50"));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stopping = true));

        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(brokerUrl);
        factory.setAutomaticRecoveryEnabled(false);
        Channel[] channel = {null};
        java.sql.Connection db = database(jdbc);
        log("running" + (flaw == null ? "" : " with flaw " + flaw));
        while (!stopping) {
            try {
                List<Job> jobs = claim(db);
                if (jobs.isEmpty()) {
                    Thread.sleep(pollMs);
                    continue;
                }
                for (Job job : jobs) {
                    int outcome = publish(channel, factory, queue, job);
                    if (outcome == 1) {
                        write(db, COMPLETE, List.of(), job);
                    } else {
                        failed(db, job, outcome == 0);
                    }
                }
            } catch (SQLException e) {
                // The connection is gone: the jobs held return to the queue when their lease ends.
                log("database connection lost: " + e.getMessage());
                try {
                    db.close();
                } catch (SQLException ignored) {
                    // gone already
                }
                db = database(jdbc);
            }
        }
    }
}
