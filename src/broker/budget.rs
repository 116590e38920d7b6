//! How many bytes of message bodies a move (`redrive`, `apply --migrate`) holds at once.
//!
//! A move holds a message from its delivery until its copy is confirmed and the original
//! acknowledged; meanwhile the copy being published is a second buffer of the same size. With
//! batches counted in messages (200), 200 dead letters of 8 MB took 1.6 GB. Here both are
//! counted in bytes:
//!
//! - Batches: a message joins the batch while the batch's bodies and its own stay within half
//!   the bound ([`Budget::fits`]); one that does not fit starts the next batch, and one larger
//!   than half the bound is a batch alone. Publishing a batch's copies then holds at most half
//!   the bound again, so received and copied stay within the bound.
//! - Taking: AMQP bounds what a broker pushes to a consumer only by a count (`basic.qos`
//!   prefetch_count; RabbitMQ does not implement prefetch_size), and a delivery pushed is in
//!   hopper's memory whether or not it has been looked at. So a move takes each message with
//!   `basic.get`: nothing arrives that was not asked for, and the one taken that does not fit
//!   the batch is carried into the next. This replaced a consumer whose window was sized from
//!   the first message: measured (debug build, 3.10, 4.0 and 4.3), with a first message of
//!   1 KiB and then 4 MiB ones under a bound of 16 MiB, it took in a window of the large ones
//!   and peaked at 118 to 121 MiB in a redrive and 162 to 164 MiB in a migration; taken one by
//!   one, 46 MiB in both.
//!
//! Held at once, then: a batch's bodies (half the bound), their copies being published (half
//! again), and the one message carried; a message larger than the bound is a batch alone. A
//! filtered redrive and a dry run hold the dead letters that stay unacknowledged, their
//! delivery tags only.

use std::fmt;

use super::mover::BATCH;

/// The bound unless `--max-bytes-in-flight` says otherwise.
pub const DEFAULT: u64 = 64 * MIB;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The most bytes of message bodies a move holds at once (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    bytes: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget { bytes: DEFAULT }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&show(self.bytes))
    }
}

impl Budget {
    /// A bound of `bytes` (at least 1).
    pub fn new(bytes: u64) -> Budget {
        Budget { bytes: bytes.max(1) }
    }

    pub fn bytes(self) -> u64 {
        self.bytes
    }

    /// What received messages, and again their copies being published, may each take.
    fn half(self) -> u64 {
        (self.bytes / 2).max(1)
    }

    /// Whether a message of `size` bytes joins a batch of `len` messages holding `held` bytes:
    /// always into an empty batch (a message larger than the bound moves alone); otherwise
    /// while the batch has fewer than `BATCH` messages and stays within half the bound.
    pub fn fits(self, held: u64, len: usize, size: u64) -> bool {
        len == 0 || (len < usize::from(BATCH) && held.saturating_add(size) <= self.half())
    }
}

/// The batches `sizes` make, in order, as a move cuts them: each a range of indexes. Pure; what
/// the movers do message by message.
pub fn batches(budget: Budget, sizes: &[u64]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut held) = (0, 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        if !budget.fits(held, i - start, size) {
            out.push(start..i);
            (start, held) = (i, 0);
        }
        held = held.saturating_add(size);
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// Parses a size: a whole number of bytes, or with a unit, `64MiB`, `512KiB`, `1GiB` (powers of
/// 1024) or `64MB`, `1GB` (powers of 1000); case and a space before the unit do not matter.
pub fn parse(value: &str) -> Result<Budget, String> {
    let text = value.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let wrong = || {
        format!(
            "`{value}` is not a size: write a whole number of bytes, or one with a unit, as `64MiB`, `512KiB`, `1GB`"
        )
    };
    let number: u64 = number.parse().map_err(|_| wrong())?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => KIB,
        "mib" | "m" => MIB,
        "gib" | "g" => 1024 * MIB,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(wrong()),
    };
    let bytes = number.checked_mul(scale).ok_or_else(|| format!("`{value}` is more bytes than hopper can count"))?;
    if bytes == 0 {
        return Err("a bound of 0 bytes lets nothing move; leave the option out for the default (64MiB)".into());
    }
    Ok(Budget::new(bytes))
}

/// A size as people write it: in the largest binary unit it is a whole number of.
fn show(bytes: u64) -> String {
    for (unit, scale) in [("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{unit}", bytes / scale);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        let bytes = |v: &str| parse(v).map(Budget::bytes);
        assert_eq!(bytes("64MiB"), Ok(64 * MIB));
        assert_eq!(bytes("64mib"), Ok(64 * MIB));
        assert_eq!(bytes(" 16 MiB "), Ok(16 * MIB));
        assert_eq!(bytes("512KiB"), Ok(512 * KIB));
        assert_eq!(bytes("1GiB"), Ok(1024 * MIB));
        assert_eq!(bytes("1G"), Ok(1024 * MIB));
        assert_eq!(bytes("1GB"), Ok(1_000_000_000));
        assert_eq!(bytes("64MB"), Ok(64_000_000));
        assert_eq!(bytes("10kb"), Ok(10_000));
        assert_eq!(bytes("1048576"), Ok(MIB));
        assert_eq!(bytes("100B"), Ok(100));
        for wrong in ["", "MiB", "64 MiBs", "-1MiB", "1.5GiB", "64TiB!", "x"] {
            assert!(parse(wrong).unwrap_err().contains("is not a size"), "{wrong:?}");
        }
        assert!(parse("0MiB").unwrap_err().contains("0 bytes"));
        assert!(parse("99999999999999GiB").unwrap_err().contains("more bytes"));
    }

    #[test]
    fn sizes_show_as_written() {
        assert_eq!(Budget::default().to_string(), "64MiB");
        assert_eq!(Budget::new(1536).to_string(), "1536B");
        assert_eq!(Budget::new(3 * KIB).to_string(), "3KiB");
        assert_eq!(parse(&Budget::new(5 * 1024 * MIB).to_string()), Ok(Budget::new(5 * 1024 * MIB)));
    }

    #[test]
    fn a_batch_holds_half_the_bound_and_a_message_larger_moves_alone() {
        let budget = Budget::new(16 * MIB);
        let mb4 = 4 * MIB;
        // Two of 4 MiB fill half of 16 MiB: batches of two.
        assert_eq!(batches(budget, &[mb4; 5]), vec![0..2, 2..4, 4..5]);
        // 20 MiB is larger than the bound: alone, and it does not take the small ones with it.
        assert_eq!(batches(budget, &[1, 20 * MIB, 1, 1]), vec![0..1, 1..2, 2..4]);
        assert_eq!(batches(budget, &[20 * MIB, 20 * MIB]), vec![0..1, 1..2]);
        // Small messages: at most BATCH at once, as before.
        assert_eq!(batches(budget, &[10; 450]), vec![0..200, 200..400, 400..450]);
        assert!(batches(budget, &[]).is_empty());
    }

    proptest! {
        #[test]
        fn batches_cover_every_message_in_order_within_the_bound(
            bound in 1u64..10_000,
            sizes in proptest::collection::vec(0u64..12_000, 0..300),
        ) {
            let budget = Budget::new(bound);
            let cut = batches(budget, &sizes);
            let mut next = 0;
            for range in &cut {
                prop_assert_eq!(range.start, next);
                prop_assert!(!range.is_empty());
                prop_assert!(range.len() <= usize::from(BATCH));
                let held: u64 = sizes[range.clone()].iter().sum();
                // Within half the bound, or a single message (which may be larger).
                prop_assert!(held <= budget.half() || range.len() == 1, "{:?} holds {}", range, held);
                next = range.end;
            }
            prop_assert_eq!(next, sizes.len());
            // Never cut early: the next message would not have fitted.
            for pair in cut.windows(2) {
                let held: u64 = sizes[pair[0].clone()].iter().sum();
                prop_assert!(!budget.fits(held, pair[0].len(), sizes[pair[1].start]));
            }
        }
    }
}
