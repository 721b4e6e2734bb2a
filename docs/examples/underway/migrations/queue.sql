-- The queue the relays work on, as underway's Queue::builder().build() creates it
-- (src/queue.rs at 89e9bf9, Queue::create: `insert into underway.task_queue (name) values ($1)`),
-- for the queue named "outbox". A seed row: kept between the run's cases.
insert into underway.task_queue (name) values ('outbox');
