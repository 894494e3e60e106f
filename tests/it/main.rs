//! One integration-test crate (one build, one link): a file per behaviour.
//! Its harness is `suite`'s: tests are declared with `it!` or `both!`.

#[macro_use]
mod suite;

mod support;

mod backends;

mod cli;
mod demo;
mod enqueue;
mod file;
mod layering;
mod outbox;
mod postgres;
mod reliability;
mod runtime;
mod safety;
mod schedules;
mod serve;

fn main() {
    suite::main();
}
