//! What RabbitMQ does with a retry topology, by release. Every claim here is backed by a test on
//! that version (the integration tests run on 3.10, 4.0 and 4.3) or by the release notes cited.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// A RabbitMQ release, such as 4.3.6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// What a spec is judged as when no broker or `--broker-version` says otherwise: the current
/// release line.
pub const CURRENT: Version = Version { major: 4, minor: 3, patch: 0 };

/// The oldest release line hopper judges: the oldest in the test matrix. What a release outside
/// OLDEST..=CURRENT does is not measured here, so hopper does not claim to know it.
pub const OLDEST: Version = Version { major: 3, minor: 10, patch: 0 };

/// What makes a quorum queue count a delivery toward its delivery limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryCount {
    /// Up to 4.2: every return counts (`basic.reject` or `basic.nack` with requeue, a consumer
    /// crash, a channel closed with the message unacknowledged).
    EveryReturn,
    /// 4.3: only a failed delivery counts (`basic.reject`, a consumer crash or lost
    /// connection); `basic.nack` with requeue and consumer timeouts do not (4.3.0 release notes;
    /// measured: 16,425 nacks in 15 s, never dead-lettered).
    FailedOnly,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version { major, minor, patch }
    }

    fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether hopper's claims cover this release line (3.10 to 4.3, whatever the patch).
    pub fn known(self) -> bool {
        (OLDEST.major, OLDEST.minor) <= (self.major, self.minor)
            && (self.major, self.minor) <= (CURRENT.major, CURRENT.minor)
    }

    /// A release line hopper judges, or why not, with the nearest line it does judge.
    pub fn parse_known(s: &str) -> Result<Version, String> {
        let version: Version = s.parse()?;
        if version.known() {
            return Ok(version);
        }
        let nearest = if version < OLDEST { OLDEST } else { CURRENT };
        Err(format!(
            "hopper knows RabbitMQ {}.{} to {}.{}, and {version} is outside them: what that release does with a retry topology is not measured; judge it as {}.{} (the nearest hopper knows) only if you know it behaves alike",
            OLDEST.major, OLDEST.minor, CURRENT.major, CURRENT.minor, nearest.major, nearest.minor
        ))
    }

    /// The delivery limit of a quorum queue that sets none: 20 since 4.0 (4.0.1 release notes);
    /// none before, so a requeued message can come back forever.
    pub fn default_delivery_limit(self) -> Option<i64> {
        self.at_least(4, 0).then_some(20)
    }

    /// What a negative delivery limit means: unlimited since 4.0; on 3.x the broker accepts it
    /// and then drops (or dead-letters) a message at its first return, as a limit of 0 (measured
    /// on 3.10.8).
    pub fn negative_delivery_limit(self) -> Option<i64> {
        (!self.at_least(4, 0)).then_some(0)
    }

    pub fn delivery_count(self) -> DeliveryCount {
        if self.at_least(4, 3) { DeliveryCount::FailedOnly } else { DeliveryCount::EveryReturn }
    }

    /// Quorum queues delay redeliveries themselves (`x-delayed-retry-*`), since 4.3.
    pub fn native_delayed_retry(self) -> bool {
        self.at_least(4, 3)
    }

    /// Why this release refuses to declare a queue with this argument, if it does. Measured on
    /// 4.3.6: `x-queue-version = 1` is refused (406, classic queue v1 is gone) and
    /// `x-queue-master-locator` closes the connection (541, a deprecated feature no longer
    /// permitted); `x-queue-mode` is still accepted, as is a passive declaration without the
    /// configure permission, though the 4.3 release notes announce both changes.
    pub fn refuses_argument(self, key: &str, value: &crate::model::ArgValue) -> Option<&'static str> {
        if !self.at_least(4, 3) {
            return None;
        }
        match (key, value.as_int()) {
            ("x-queue-version", Some(1)) => Some("RabbitMQ 4.3 refuses x-queue-version = 1 (classic queue v1 is gone)"),
            ("x-queue-master-locator", _) => {
                Some("RabbitMQ 4.3 refuses x-queue-master-locator (a deprecated feature, no longer permitted)")
            }
            _ => None,
        }
    }

    /// Whether this release knows the argument at all (an unknown one is stored and ignored).
    pub fn knows_argument(self, key: &str) -> bool {
        !key.starts_with("x-delayed-retry-") || self.native_delayed_retry()
    }
}

impl FromStr for Version {
    type Err = String;

    /// `4.3.6`, `4.3`, or `3.13.7+rc.1`-like strings: the numbers before anything else.
    fn from_str(s: &str) -> Result<Version, String> {
        let numbers: Vec<u32> = s.split(['.', '-', '+']).take(3).map_while(|part| part.parse().ok()).collect();
        match numbers.as_slice() {
            [major, minor, patch] => Ok(Version::new(*major, *minor, *patch)),
            [major, minor] => Ok(Version::new(*major, *minor, 0)),
            _ => Err(format!("`{s}` is not a RabbitMQ version such as 4.3 or 3.10.8")),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_versions_as_brokers_print_them() {
        assert_eq!("4.3.6".parse(), Ok(Version::new(4, 3, 6)));
        assert_eq!("4.3".parse(), Ok(Version::new(4, 3, 0)));
        assert_eq!("3.13.7+rc.1".parse(), Ok(Version::new(3, 13, 7)));
        assert!("four".parse::<Version>().is_err());
    }

    #[test]
    fn only_known_release_lines_are_judged() {
        for known in ["3.10", "3.10.8", "3.13.7", "4.0.5", "4.3", "4.3.99"] {
            assert_eq!(Version::parse_known(known), known.parse(), "{known}");
        }
        for unknown in ["3.9", "3.9.29", "2.8", "4.4", "5.0", "10.0"] {
            let Err(why) = Version::parse_known(unknown) else { panic!("{unknown} was judged") };
            assert!(why.contains("3.10 to 4.3") && why.contains("outside"), "{unknown}: {why}");
        }
        assert!(Version::parse_known("3.9").unwrap_err().contains("judge it as 3.10"));
        assert!(Version::parse_known("5.0").unwrap_err().contains("judge it as 4.3"));
        assert!(Version::parse_known("four").unwrap_err().contains("not a RabbitMQ version"));
    }

    #[test]
    fn what_changed_where() {
        let (v3, v40, v43) = (Version::new(3, 10, 8), Version::new(4, 0, 5), Version::new(4, 3, 6));
        assert_eq!((v3.default_delivery_limit(), v40.default_delivery_limit()), (None, Some(20)));
        assert_eq!(v40.delivery_count(), DeliveryCount::EveryReturn);
        assert_eq!((v3.negative_delivery_limit(), v40.negative_delivery_limit()), (Some(0), None));
        assert_eq!(v43.delivery_count(), DeliveryCount::FailedOnly);
        assert!(!v40.native_delayed_retry() && v43.native_delayed_retry());
        assert!(!v40.knows_argument("x-delayed-retry-type") && v43.knows_argument("x-delayed-retry-type"));
        let v1 = crate::model::ArgValue::Int(1);
        assert!(v40.refuses_argument("x-queue-version", &v1).is_none());
        assert!(v43.refuses_argument("x-queue-version", &v1).is_some());
        assert!(v43.refuses_argument("x-queue-mode", &crate::model::ArgValue::str("lazy")).is_none());
    }
}
