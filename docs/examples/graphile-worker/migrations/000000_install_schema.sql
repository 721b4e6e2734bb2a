create schema if not exists ${escapedWorkerSchema};
create table if not exists ${escapedWorkerSchema}.migrations(
  id int primary key,
  ts timestamptz default now() not null
);
alter table ${escapedWorkerSchema}.migrations add column if not exists breaking boolean not null default false;
