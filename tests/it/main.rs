//! One integration-test crate (one build, one link): a file per behaviour.

mod support;

mod backends;

mod cli;
mod demo;
mod enqueue;
mod file;
mod outbox;
mod postgres;
mod reliability;
mod runtime;
mod safety;
mod schedules;
mod serve;
