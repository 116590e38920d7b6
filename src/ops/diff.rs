//! `diff`: the plan, read as a description of the differences between the spec and the broker.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::broker::{Endpoint, identity};
use crate::compile::CompiledTopology;
use crate::hazard::{self, Finding};
use crate::model::{ArgValue, Binding, ExchangeName, Object, Owner, QueueName};
use crate::plan::{self, Difference, Options, Plan, Step, WayOut};
use crate::policy::{Setting, Source};

/// One object's state against the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    InSync,
    /// The spec has it, the broker does not: `apply` creates it.
    Missing,
    /// It differs in something that cannot change in place.
    Conflict,
    /// Under a topology's names, no longer in the spec.
    Extra,
    /// A policy makes the queue behave otherwise than the spec says.
    Overridden,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InSync => "in sync",
            Status::Missing => "missing",
            Status::Conflict => "conflict",
            Status::Extra => "extra",
            Status::Overridden => "overridden",
        }
    }
}

/// What an entry is about, identified as RabbitMQ identifies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    Exchange {
        name: ExchangeName,
    },
    Queue {
        name: QueueName,
    },
    Binding(Binding),
    /// An owner's record (`plan::ownership`), missing or out of date.
    Record {
        owner: Owner,
    },
}

impl Subject {
    fn of(object: Object) -> Subject {
        match object {
            Object::Exchange(e) => Subject::Exchange { name: e.name },
            Object::Queue(q) => Subject::Queue { name: q.name },
            Object::Binding(b) => Subject::Binding(b),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Subject::Exchange { .. } => "exchange",
            Subject::Queue { .. } => "queue",
            Subject::Binding(_) => "binding",
            Subject::Record { .. } => "owner record",
        }
    }
}

/// For people: a name, or a binding as `source -> destination ("key")`.
impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Exchange { name } => write!(f, "{name}"),
            Subject::Queue { name } => write!(f, "{name}"),
            Subject::Binding(b) => write!(f, "{b}"),
            Subject::Record { owner } => write!(f, "{owner}"),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Entry {
    pub status: Status,
    #[serde(flatten)]
    pub subject: Subject,
    /// What an entry says beyond its status, when it says more. Boxed: most entries are in sync
    /// and say nothing more, and a 10,000-topology diff holds 150,000 entries: 296 bytes each
    /// when every field was in line (44 MB), 88 now (13 MB).
    #[serde(flatten)]
    pub details: Option<Box<Details>>,
}

/// The fields of an entry that one status has and the others do not; serialized in line with
/// the entry's own.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Details {
    /// For `in_sync`: why an object that differs in form counts as in sync.
    Note { note: String },
    Conflict {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        differences: Vec<Difference>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        ways_out: Vec<WayOut>,
    },
    /// For an `extra` queue: what deleting it would lose.
    Extra {
        #[serde(skip_serializing_if = "Option::is_none")]
        messages: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        consumers: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        drains_into: Option<String>,
    },
    /// For `overridden`: the setting, the spec's value, the effective value and who set it.
    Overridden {
        setting: Setting,
        #[serde(skip_serializing_if = "Option::is_none")]
        spec: Option<ArgValue>,
        effective: ArgValue,
        /// `policy` or `operator_policy` (a binding's `source` is its exchange).
        set_by: Source,
        policy: String,
    },
}

#[derive(Debug, Serialize)]
pub struct VhostDiff {
    pub vhost: String,
    pub objects: Vec<Entry>,
    /// The cluster's view of the spec's queues: members or nodes down, nodes with an alarm
    /// (the cluster rules of `inspect`). Not drift: the objects are as the spec says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<Finding>,
    /// The HTTP status with which the management API refused to list the owners' records (see
    /// `plan::ownership`): conflicts with other owners and retired topologies are then unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owners_unread: Option<u16>,
    /// Objects under hopper's names that no owner claims and the spec does not declare
    /// (`plan::unclaimed`). Not drift: no spec says what they should be.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unclaimed: Vec<plan::Unclaimed>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub in_sync: bool,
    /// Count of entries per status.
    pub summary: BTreeMap<Status, usize>,
    pub vhosts: Vec<VhostDiff>,
}

pub fn run(endpoint: &Endpoint, by_vhost: &[(&str, Vec<&CompiledTopology>)]) -> Result<Report> {
    let vhosts: Vec<&str> = by_vhost.iter().map(|(v, _)| *v).collect();
    let desired: Vec<plan::Desired> = by_vhost.iter().map(|(_, t)| plan::Desired::new(t)).collect();
    let plans = super::runtime()?.block_on(async {
        let options =
            Options { prune: false, admin: Some(endpoint.admin()), migrate: false, consumers_upgraded: false };
        let cannot = |e: anyhow::Error| {
            anyhow::anyhow!("hopper diff reads the broker through the management API and cannot: {e:#}")
        };
        // Everything read at once: who answers at each endpoint and every vhost. Nothing is
        // trusted before the two endpoints are known to be one cluster.
        let reading = super::Reading::of(endpoint, &vhosts, false).await;
        let (http_identity, amqp_identity, readings) =
            (reading.http.expect("asked of the management API"), reading.amqp, reading.vhosts);
        let http_identity = http_identity.map_err(cannot)?;
        // Counts are read over AMQP when it answers: then it must be the same cluster.
        let amqp_identity = amqp_identity.ok();
        if let Some(amqp_identity) = &amqp_identity {
            identity::same_cluster(endpoint, amqp_identity, &http_identity)?;
        }
        crate::output::narrate(|| {
            format!(
                "broker: {} (RabbitMQ {}), management API {} as user `{}`; AMQP {}",
                http_identity,
                http_identity.version,
                crate::broker::redact(&endpoint.management_url),
                endpoint.username(),
                amqp_identity.as_ref().map_or("unreachable: no exact counts".to_string(), |(a, _)| a.clone())
            )
        });
        let all: Vec<&CompiledTopology> = by_vhost.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        super::check_release(&http_identity.version, &all)?;
        let mut plans = Vec::new();
        for (((vhost, _), desired), live) in by_vhost.iter().zip(&desired).zip(readings) {
            let mut live = live.map_err(cannot)?;
            // Counts only where they matter: left-over queues (what prune would do) and
            // conflicting ones (what their ways out say), exact over AMQP when it answers. A
            // session is opened only then.
            let mut session = None;
            let left_over = super::left_over_queues(&live, desired);
            if !left_over.is_empty() {
                session = super::counting_session(endpoint, vhost, &amqp_identity, &http_identity).await;
            }
            super::count(endpoint, vhost, session.as_mut(), &mut live, &left_over).await?;
            let mut plan = desired.plan(vhost, &live, &options);
            let conflicting: Vec<_> = plan
                .conflicts()
                .filter_map(|s| match s {
                    Step::Conflict { object: Object::Queue(q), .. } => Some(q.name.clone()),
                    _ => None,
                })
                .collect();
            if !conflicting.is_empty() {
                if session.is_none() {
                    session = super::counting_session(endpoint, vhost, &amqp_identity, &http_identity).await;
                }
                super::count(endpoint, vhost, session.as_mut(), &mut live, &conflicting).await?;
                plan = desired.plan(vhost, &live, &options);
            }
            if let Some(session) = session {
                session.close().await;
            }
            let placements = live.queues.iter().map(|(name, q)| (name, q.placement.as_ref()));
            let hazards: Vec<Finding> = hazard::placements(placements, live.nodes.as_deref().unwrap_or_default())
                .into_iter()
                .filter(|f| f.queues.is_empty() || f.queues.iter().any(|q| desired.queues().contains(q)))
                .collect();
            let unread = match live.records {
                crate::live::Records::Refused { status } => Some(status),
                _ => None,
            };
            let unclaimed = plan::unclaimed(desired, &live).unwrap_or_default();
            plans.push((plan, (hazards, unread, unclaimed)));
        }
        anyhow::Ok(plans)
    })?;
    let (plans, extras): (Vec<Plan>, Vec<_>) = plans.into_iter().unzip();
    let mut report = report(plans);
    for (v, (hazards, unread, unclaimed)) in report.vhosts.iter_mut().zip(extras) {
        (v.hazards, v.owners_unread, v.unclaimed) = (hazards, unread, unclaimed);
    }
    Ok(report)
}

/// The plan, read as a description of the differences. Pure. The plans are taken, not copied:
/// at 2,000 topologies, copying every object's names cost 5 ms after the last answer.
pub fn report(plans: Vec<Plan>) -> Report {
    let mut summary = BTreeMap::new();
    let vhosts: Vec<VhostDiff> = plans
        .into_iter()
        .map(|p| {
            // Sized once: at 10,000 topologies the entries are tens of megabytes, and growing
            // them by doubling copied each one again.
            let mut objects: Vec<Entry> = Vec::with_capacity(p.steps.len() + p.overrides.len());
            objects.extend(p.steps.into_iter().filter_map(entry));
            objects.extend(p.overrides.into_iter().map(|o| {
                Entry::new(Status::Overridden, Subject::Queue { name: o.queue }).with(Details::Overridden {
                    setting: o.setting,
                    spec: o.spec,
                    effective: o.effective,
                    set_by: o.source,
                    policy: o.policy,
                })
            }));
            for e in &objects {
                *summary.entry(e.status).or_insert(0) += 1;
            }
            VhostDiff { vhost: p.vhost, objects, hazards: Vec::new(), owners_unread: None, unclaimed: Vec::new() }
        })
        .collect();
    let in_sync = summary.keys().all(|s| *s == Status::InSync);
    Report { in_sync, summary, vhosts }
}

impl Entry {
    fn new(status: Status, subject: Subject) -> Entry {
        Entry { status, subject, details: None }
    }

    fn with(self, details: Details) -> Entry {
        Entry { details: Some(Box::new(details)), ..self }
    }

    /// For `in_sync`: why an object that differs in form counts as in sync.
    pub fn note(&self) -> Option<&str> {
        match self.details.as_deref() {
            Some(Details::Note { note }) => Some(note),
            _ => None,
        }
    }
}

fn entry(step: Step) -> Option<Entry> {
    Some(match step {
        Step::InSync { object, note } => {
            let entry = Entry::new(Status::InSync, Subject::of(object));
            match note {
                Some(note) => entry.with(Details::Note { note }),
                None => entry,
            }
        }
        Step::Migrate { .. } | Step::MoveMessages { .. } => unreachable!("diff plans no migration"),
        // `Ensure` only arises without the management API, which diff refuses to work without.
        Step::Create { object } | Step::Ensure { object } => Entry::new(Status::Missing, Subject::of(object)),
        Step::Conflict { object, differences, ways_out } => {
            Entry::new(Status::Conflict, Subject::of(object)).with(Details::Conflict { differences, ways_out })
        }
        Step::Unbind { binding } | Step::KeptBinding { binding, .. } => {
            Entry::new(Status::Extra, Subject::Binding(binding))
        }
        Step::Extra { queue, messages, consumers, drains_into, .. } => {
            Entry::new(Status::Extra, Subject::Queue { name: queue }).with(Details::Extra {
                messages,
                consumers,
                drains_into,
            })
        }
        Step::KeptExchange { exchange, .. } => Entry::new(Status::Extra, Subject::Exchange { name: exchange }),
        Step::Record { owner, .. } => Entry::new(Status::Missing, Subject::Record { owner }),
        Step::Delete { .. } => return None,
        // Planned only with --prune, which diff does not take; shown as what it is, an extra.
        Step::DeleteExchange { exchange } => Entry::new(Status::Extra, Subject::Exchange { name: exchange }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queue(name: &str) -> Subject {
        Subject::Queue { name: QueueName::new(name) }
    }

    /// Each status's details are fields of the entry itself, as they were before they were
    /// boxed: `--format json` is read by scripts.
    #[test]
    fn details_are_fields_of_the_entry() {
        let json = |e: Entry| serde_json::to_value(e).unwrap();
        assert_eq!(
            json(Entry::new(Status::InSync, queue("q"))),
            json!({"status": "in_sync", "kind": "queue", "name": "q"})
        );
        assert_eq!(
            json(Entry::new(Status::InSync, queue("q")).with(Details::Note { note: "why".into() })),
            json!({"status": "in_sync", "kind": "queue", "name": "q", "note": "why"})
        );
        let conflict = Details::Conflict {
            differences: vec![Difference {
                property: plan::Property::Durable,
                live: Some(ArgValue::Bool(false)),
                spec: Some(ArgValue::Bool(true)),
            }],
            ways_out: vec![WayOut::says("recreate it")],
        };
        let conflict = json(Entry::new(Status::Conflict, queue("q")).with(conflict));
        assert_eq!(conflict["differences"][0]["live"], json!(false));
        assert_eq!(conflict["ways_out"][0]["says"], json!("recreate it"));
        assert_eq!(
            json(Entry::new(Status::Extra, queue("q")).with(Details::Extra {
                messages: Some(2),
                consumers: None,
                drains_into: Some("orders".into())
            })),
            json!({"status": "extra", "kind": "queue", "name": "q", "messages": 2, "drains_into": "orders"})
        );
        assert_eq!(
            json(Entry::new(Status::Overridden, queue("q")).with(Details::Overridden {
                setting: Setting::MessageTtl,
                spec: None,
                effective: ArgValue::Int(2000),
                set_by: Source::OperatorPolicy,
                policy: "cap".into(),
            })),
            json!({"status": "overridden", "kind": "queue", "name": "q", "setting": "message-ttl",
                   "effective": 2000, "set_by": "operator_policy", "policy": "cap"})
        );
    }

    /// A diff holds an entry per object (150,000 at 10,000 topologies), most of them in sync:
    /// what only some statuses have stays out of line.
    #[test]
    fn an_entry_is_its_subject_and_a_pointer() {
        assert!(
            std::mem::size_of::<Entry>() <= std::mem::size_of::<Subject>() + 16,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }
}
