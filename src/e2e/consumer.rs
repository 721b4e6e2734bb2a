//! The consumer: reads every delivery from the broker (NATS JetStream or RabbitMQ) and records
//! it with its arrival time, until the run drains the broker.

use super::*;

/// Lets the consumer catch up with what the broker holds: NATS, up to the stream's last
/// sequence; RabbitMQ, until its queue is empty and nothing arrived for half a second. Five
/// seconds at most.
pub(super) fn drain(broker: &BrokerRun, runtime: &tokio::runtime::Runtime, deliveries: &Mutex<Vec<Delivery>>) {
    let draining = std::time::Instant::now();
    let count = || deliveries.lock().unwrap_or_else(|p| p.into_inner()).len();
    match broker {
        BrokerRun::Nats(server) => {
            // Bounded too: a server that is down (a run cut short by its deadline mid-outage)
            // would keep the connection trying for ever.
            let last = runtime
                .block_on(async {
                    tokio::time::timeout(std::time::Duration::from_secs(5), last_sequence(&server.url())).await
                })
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            while draining.elapsed() < std::time::Duration::from_secs(5)
                && deliveries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .filter_map(|d| d.sequence)
                    .max()
                    .unwrap_or(0)
                    < last
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        BrokerRun::Rabbit { rabbit, queue, .. } => {
            let (mut seen, mut quiet) = (count(), std::time::Instant::now());
            while draining.elapsed() < std::time::Duration::from_secs(5) {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if count() != seen {
                    (seen, quiet) = (count(), std::time::Instant::now());
                }
                let ready = runtime.block_on(async {
                    tokio::time::timeout(std::time::Duration::from_secs(2), rabbit.ready(queue)).await.ok().flatten()
                });
                if ready == Some(0) && quiet.elapsed() > std::time::Duration::from_millis(500) {
                    break;
                }
            }
        }
    }
}

/// The consumer: a durable pull consumer on the stream, every message recorded and
/// acknowledged, through broker restarts, until told to stop.
pub(super) fn consume(
    url: &str,
    epoch_ms: u64,
    deliveries: &Mutex<Vec<Delivery>>,
    consuming: &std::sync::atomic::AtomicBool,
) {
    use futures_util::StreamExt;
    let runtime = nats::runtime();
    runtime.block_on(async {
        let Ok(client) = nats::connect(url).await else { return };
        let js = nats::jetstream(client, std::time::Duration::from_secs(2));
        while consuming.load(std::sync::atomic::Ordering::Relaxed) {
            let consumer = async {
                let stream = js.get_stream(nats::STREAM).await.map_err(|e| e.to_string())?;
                stream
                    .get_or_create_consumer(
                        nats::CONSUMER,
                        async_nats::jetstream::consumer::pull::Config {
                            durable_name: Some(nats::CONSUMER.to_string()),
                            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                            ack_wait: std::time::Duration::from_secs(2),
                            ..Default::default()
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())
            };
            let consumer: async_nats::jetstream::consumer::Consumer<async_nats::jetstream::consumer::pull::Config> =
                match consumer.await {
                    Ok(c) => c,
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
            while consuming.load(std::sync::atomic::Ordering::Relaxed) {
                let batch =
                    consumer.fetch().max_messages(100).expires(std::time::Duration::from_millis(300)).messages().await;
                let Ok(mut batch) = batch else { break };
                let mut failed = false;
                while let Some(message) = batch.next().await {
                    let Ok(message) = message else {
                        failed = true;
                        break;
                    };
                    let received_ms = now_ms(epoch_ms);
                    let id = message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(nats::MSG_ID))
                        .map(|v| v.as_str().to_string())
                        .unwrap_or_default();
                    let publication =
                        message.headers.as_ref().and_then(|h| h.get(nats::PUBLICATION)).map(|v| v.as_str().to_string());
                    if let Ok(info) = message.info() {
                        let stored_unix_ms = (info.published.unix_timestamp_nanos() / 1_000_000) as u64;
                        deliveries.lock().unwrap_or_else(|p| p.into_inner()).push(Delivery {
                            message: id,
                            copy: format!("sequence {}", info.stream_sequence),
                            sequence: Some(info.stream_sequence),
                            publication,
                            stored_ms: stored_unix_ms.saturating_sub(epoch_ms) + CLOCK_OFFSET,
                            received_ms,
                            redelivered: info.delivered > 1,
                        });
                    }
                    let _ = message.ack().await;
                }
                if failed {
                    break;
                }
            }
        }
    });
}

/// The consumer on RabbitMQ: the run's queue, manual acks, every delivery recorded; a copy is
/// known by the publication that sent it (a header), when it was stored by when it was sent.
pub(super) fn consume_rabbit(
    url: &str,
    queue: &str,
    epoch_ms: u64,
    deliveries: &Mutex<Vec<Delivery>>,
    consuming: &std::sync::atomic::AtomicBool,
) {
    let runtime = nats::runtime();
    let go_on = || consuming.load(std::sync::atomic::Ordering::Relaxed);
    let each = |r: rabbitmq::Received| {
        let received_ms = now_ms(epoch_ms);
        let mut list = deliveries.lock().unwrap_or_else(|p| p.into_inner());
        let copy = r.publication.clone().unwrap_or_else(|| format!("unnamed copy {}", list.len()));
        list.push(Delivery {
            message: r.message,
            copy,
            sequence: None,
            publication: r.publication,
            stored_ms: received_ms,
            received_ms,
            redelivered: r.redelivered,
        });
    };
    while go_on() {
        if runtime.block_on(rabbitmq::consume(url, queue, &go_on, &each)).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
