//! One integration-test binary, one module per area. Broker tests run against RabbitMQ 3.10 and
//! 4.0 (see support.rs), each in a vhost of its own that is removed afterwards.

mod apply;
mod bench;
mod cli;
mod cluster;
mod config;
mod connect;
mod consumer;
mod diff;
mod docs;
mod endpoints;
mod export;
mod flow;
mod gates;
mod hazards;
mod inspect;
mod migrate;
mod owners;
mod props;
mod prune;
mod redrive;
mod reference;
mod renames;
mod safety;
mod schema;
mod spawned;
mod spec_errors;
mod support;
mod tls;

#[allow(dead_code)]
#[path = "../../examples/retry_consumer.rs"]
mod retry_consumer;

/// What build.rs runs to find the commit, run here outside any checkout.
#[path = "../../build/commit.rs"]
mod build_commit;
