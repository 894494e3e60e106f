//! The `litejob` command: inspect and repair a queue file, run the demo and
//! the benchmark. Results on stdout, logs and errors on stderr.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
