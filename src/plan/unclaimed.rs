//! Objects named as hopper names a topology's that no owner's record claims and the spec does not
//! declare: left by a hopper older than the records, or made by hand. Listed so that nothing
//! hopper-shaped is invisible; never changed, since no spec says what they are for.

use std::collections::BTreeSet;

use super::Desired;
use crate::live::{Live, Records};
use crate::model::{ArgValue, Key, ObjectKind, QueueName, arg};

/// One unclaimed exchange or queue, with the main queue whose names it follows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Unclaimed {
    pub kind: ObjectKind,
    pub name: String,
    pub main_queue: QueueName,
}

/// Every unclaimed object of the vhost, by main queue; `None` when the records could not be read
/// (then nothing is known to be unclaimed). A main queue is a live queue that dead-letters into
/// `<queue>.dlx` or `<queue>.retry`, as every strategy's main queue does; its family is the
/// queues and exchanges under its name that hopper generates.
pub fn unclaimed(desired: &Desired, live: &Live) -> Option<Vec<Unclaimed>> {
    let Records::Read(records) = &live.records else { return None };
    let claims = super::ownership::Claims::new(records);
    let free = |kind: ObjectKind, name: &str| {
        let declared = match kind {
            ObjectKind::Queue => desired.queues.contains(&QueueName::from(name)),
            _ => desired.keys.contains(&Key::Exchange(&name.into())),
        };
        !declared && !claims.claimed(kind, name)
    };
    let mut found = BTreeSet::new();
    for (main, q) in &live.queues {
        let dead_letters_to =
            q.arguments.as_ref().and_then(|a| a.get(arg::DEAD_LETTER_EXCHANGE)).and_then(ArgValue::as_str);
        let own = |suffix: &str| dead_letters_to == Some(&[main.as_str(), suffix].concat());
        if !(own(".dlx") || own(".retry")) || !free(ObjectKind::Queue, main) {
            continue;
        }
        let mut add = |kind, name: &str| {
            found.insert(Unclaimed { kind, name: name.to_string(), main_queue: main.clone() });
        };
        add(ObjectKind::Queue, main);
        let prefix = format!("{main}.");
        for (name, _) in
            live.queues.range::<str, _>((std::ops::Bound::Included(prefix.as_str()), std::ops::Bound::Unbounded))
        {
            let Some(rest) = name.strip_prefix(&prefix) else { break };
            if generated(rest) && free(ObjectKind::Queue, name) {
                add(ObjectKind::Queue, name);
            }
        }
        for suffix in ["retry", "dlx"] {
            let name = [prefix.as_str(), suffix].concat();
            if live.exchanges.contains_key(name.as_str()) && free(ObjectKind::Exchange, &name) {
                add(ObjectKind::Exchange, &name);
            }
        }
    }
    Some(found.into_iter().collect())
}

/// Whether what follows `<queue>.` is a name hopper generates: its dead-letter queue's default
/// name, or a wait or work queue's.
fn generated(rest: &str) -> bool {
    rest == "dlq" || crate::compile::generated_suffix(rest).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Record;

    #[test]
    fn a_hand_made_family_under_hoppers_names_is_listed_and_a_recorded_one_is_not() {
        let spec = crate::spec::from_str("t.toml", "[topology.orders]\ndelays = [\"5s\"]\nmax_attempts = 2\n")
            .unwrap_or_else(|e| panic!("{}", e.render_plain()))
            .compiled;
        let refs: Vec<_> = spec.iter().collect();
        let desired = Desired::new(&refs);
        let mut live = Live::empty();
        let dead_letters = |to: &str| {
            let mut a = crate::model::Arguments::new();
            a.insert(arg::DEAD_LETTER_EXCHANGE, ArgValue::str(to));
            Some(a)
        };
        for (name, to) in [("payments", Some("payments.dlx")), ("payments.wait-5s", None), ("payments.log", None)]
            .into_iter()
            .chain([("payments.dlq", None), ("audit", Some("audit.retry")), ("plain", Some("elsewhere"))])
        {
            let q = crate::live::LiveQueue { arguments: to.and_then(dead_letters), ..Default::default() };
            live.queues.insert(name.into(), q);
        }
        live.records = Records::Read(Vec::new());
        let names = |live: &Live| {
            unclaimed(&desired, live)
                .unwrap()
                .into_iter()
                .map(|u| format!("{} {}", u.kind.as_str(), u.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&live), ["queue audit", "queue payments", "queue payments.dlq", "queue payments.wait-5s"]);
        let mut claimed = crate::live::Claimed::default();
        claimed.queues.insert("payments".into());
        let record = Record {
            owner: crate::model::Owner::new("team-p"),
            vhost: "/".into(),
            topologies: [("payments".to_string(), claimed)].into(),
        };
        live.records = Records::Read(vec![record]);
        assert_eq!(names(&live), ["queue audit"], "a claimed main queue's family is its owner's to report");
        live.records = Records::NotRead;
        assert!(unclaimed(&desired, &live).is_none());
    }
}
