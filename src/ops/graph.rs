//! `graph --live`: a vhost's network as the broker has it, for drawing.

use std::collections::BTreeSet;

use anyhow::Result;

use crate::broker::{Endpoint, http};
use crate::model::{Destination, ExchangeName};
use crate::network::Network;

/// The vhost's exchanges, queues, bindings and dead-letter routes, without the broker's own
/// exchanges that nothing uses: they say nothing about where messages go. The default exchange
/// still appears on dead-letter edges ("via default exchange").
pub fn live(endpoint: &Endpoint, vhost: &str) -> Result<Network> {
    let live = super::runtime()?.block_on(http::read(endpoint, vhost, http::Stats::Counted))?;
    let mut network = Network::from_live(&live);
    let mut used: BTreeSet<ExchangeName> = network
        .bindings()
        .iter()
        .flat_map(|b| {
            let to = match &b.destination {
                Destination::Exchange(e) => Some(e.clone()),
                Destination::Queue(_) => None,
            };
            std::iter::once(b.source.clone()).chain(to)
        })
        .collect();
    used.extend(
        network
            .queues
            .keys()
            .filter_map(|q| network.text(q, crate::policy::Setting::DeadLetterExchange))
            .map(ExchangeName::from),
    );
    network.exchanges.retain(|name, _| !name.is_default() && (!name.starts_with("amq.") || used.contains(name)));
    Ok(network)
}
