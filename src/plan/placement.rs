//! Where the broker will put the members of the quorum queues a plan creates. Pure.
//!
//! hopper does not set `x-quorum-initial-group-size`: the broker already caps its default group
//! size at the cluster's size, so the default is one the cluster can hold, and an argument would
//! make every quorum queue declared without it differ from the spec. The plan says instead what
//! the broker will do.

use serde::Serialize;

use crate::live::Node;

/// The broker's default initial group size (`quorum_cluster_size`, 3 unless configured).
pub const DEFAULT_GROUP_SIZE: usize = 3;

/// The members each new quorum queue gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumMembers {
    /// Members per queue: the default group size, capped at the cluster's size.
    pub members: usize,
    /// On which nodes, when that is known: every node of the cluster once it has no more nodes
    /// than the group size; `None` when the broker picks among more.
    pub nodes: Option<Vec<String>>,
    /// Nodes that get a member but do not run now: it starts when they are back, and until then
    /// the queue has fewer members online.
    pub stopped: Vec<String>,
}

/// Measured on RabbitMQ 3.10.8 with a node stopped: a quorum queue declared then still gets a
/// member on the stopped node (the broker places members on the cluster's nodes, running or not).
pub fn quorum_members(nodes: &[Node]) -> QuorumMembers {
    let members = DEFAULT_GROUP_SIZE.min(nodes.len()).max(1);
    if nodes.len() <= DEFAULT_GROUP_SIZE {
        QuorumMembers {
            members,
            nodes: Some(nodes.iter().map(|n| n.name.clone()).collect()),
            stopped: nodes.iter().filter(|n| !n.running).map(|n| n.name.clone()).collect(),
        }
    } else {
        QuorumMembers { members, nodes: None, stopped: Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, running: bool) -> Node {
        Node { name: name.into(), running, alarms: Vec::new() }
    }

    #[test]
    fn every_node_of_a_small_cluster_gets_a_member_and_a_large_one_three() {
        let three = [node("a", true), node("b", false), node("c", true)];
        assert_eq!(
            quorum_members(&three),
            QuorumMembers {
                members: 3,
                nodes: Some(vec!["a".into(), "b".into(), "c".into()]),
                stopped: vec!["b".into()]
            }
        );
        assert_eq!(quorum_members(&three[..1]).members, 1);
        let five: Vec<Node> = (0..5).map(|i| node(&i.to_string(), true)).collect();
        assert_eq!(quorum_members(&five), QuorumMembers { members: 3, nodes: None, stopped: Vec::new() });
    }
}
