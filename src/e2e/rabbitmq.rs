//! RabbitMQ with publisher confirms, for `e2e --broker rabbitmq`: the machine's own broker (the
//! run does not start or kill it), a durable queue of the run's own, deleted when it ends.
//! RabbitMQ keeps no deduplication window: every copy the broker stored reaches the consumer.

use super::nats::Answer;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use std::time::Duration;

/// The header naming the publication that sent a copy.
pub const PUBLICATION: &str = "outbox-check-publication";

/// A connection and a channel with publisher confirms on.
pub struct Rabbit {
    connection: Connection,
    channel: Channel,
}

pub async fn connect(url: &str) -> Result<Rabbit, String> {
    let connection =
        tokio::time::timeout(Duration::from_secs(5), Connection::connect(url, ConnectionProperties::default()))
            .await
            .map_err(|_| format!("RabbitMQ at {url}: no answer in 5 s"))?
            .map_err(|e| format!("RabbitMQ at {url}: {e}"))?;
    let channel = connection.create_channel().await.map_err(|e| format!("RabbitMQ at {url}: {e}"))?;
    channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(|e| format!("RabbitMQ at {url}: {e}"))?;
    Ok(Rabbit { connection, channel })
}

impl Rabbit {
    /// Declares the run's queue (durable: a copy the broker confirmed is on disk).
    pub async fn declare(&self, queue: &str) -> Result<(), String> {
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        self.channel
            .queue_declare(queue.into(), options, FieldTable::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("RabbitMQ: cannot declare {queue}: {e}"))
    }

    pub async fn delete(&self, queue: &str) {
        let _ = self.channel.queue_delete(queue.into(), QueueDeleteOptions::default()).await;
    }

    /// Messages still in the queue, not yet delivered.
    pub async fn ready(&self, queue: &str) -> Option<u32> {
        let options = QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
        self.channel.queue_declare(queue.into(), options, FieldTable::default()).await.ok().map(|q| q.message_count())
    }

    /// Publishes `message` (its id as the message id, the publication's id as a header), persistent,
    /// and waits up to `timeout` for the confirm. With `cut`, the relay closes its connection after
    /// the publication went out, before reading the confirm.
    pub async fn publish(
        &self,
        queue: &str,
        message: &str,
        publication: &str,
        payload: Vec<u8>,
        cut: bool,
        timeout: Duration,
    ) -> Answer {
        let mut headers = FieldTable::default();
        headers.insert(PUBLICATION.into(), AMQPValue::LongString(publication.into()));
        let properties =
            BasicProperties::default().with_message_id(message.into()).with_delivery_mode(2).with_headers(headers);
        let confirm = match self
            .channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &payload, properties)
            .await
        {
            Ok(confirm) => confirm,
            Err(_) => return Answer::Unavailable,
        };
        if cut {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = self.connection.close(200, "cut before the confirm".into()).await;
            return Answer::Timeout;
        }
        match tokio::time::timeout(timeout, confirm).await {
            Ok(Ok(c)) if c.is_ack() => Answer::Ack { sequence: None, duplicate: false },
            Ok(Ok(_)) => Answer::Unavailable,
            Ok(Err(_)) | Err(_) => Answer::Timeout,
        }
    }
}

/// One delivery as the consumer saw it: the message id, the publication header, redelivered.
pub struct Received {
    pub message: String,
    pub publication: Option<String>,
    pub redelivered: bool,
}

/// Consumes `queue` with manual acks until `go_on` says stop, calling `each` per delivery.
pub async fn consume(
    url: &str,
    queue: &str,
    go_on: &(dyn Fn() -> bool + Sync),
    each: &(dyn Fn(Received) + Sync),
) -> Result<(), String> {
    use futures_util::StreamExt;
    let rabbit = connect(url).await?;
    let mut consumer = rabbit
        .channel
        .basic_consume(
            queue.into(),
            "outbox-check-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("RabbitMQ: cannot consume {queue}: {e}"))?;
    while go_on() {
        let next = match tokio::time::timeout(Duration::from_millis(200), consumer.next()).await {
            Err(_) => continue,
            Ok(None) => break,
            Ok(Some(next)) => next,
        };
        let Ok(delivery) = next else { break };
        let message = delivery.properties.message_id().as_ref().map(|m| m.to_string()).unwrap_or_default();
        let publication =
            delivery.properties.headers().as_ref().and_then(|h| h.inner().get(PUBLICATION)).and_then(|v| match v {
                AMQPValue::LongString(s) => Some(s.to_string()),
                _ => None,
            });
        each(Received { message, publication, redelivered: delivery.redelivered });
        let _ = delivery.ack(BasicAckOptions::default()).await;
    }
    Ok(())
}
