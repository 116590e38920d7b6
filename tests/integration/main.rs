//! One integration-test binary, one module per area. Broker tests run against RabbitMQ 3.10 and
//! 4.0 (see support.rs), each in a vhost of its own that is removed afterwards.

mod apply;
mod diff;
mod export;
mod flow;
mod hazards;
mod inspect;
mod migrate;
mod props;
mod prune;
mod readme;
mod redrive;
mod safety;
mod spec_errors;
mod support;

#[allow(dead_code)]
#[path = "../../examples/retry_consumer.rs"]
mod retry_consumer;
