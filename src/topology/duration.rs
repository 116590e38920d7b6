//! Human durations (`500ms`, `30s`, `5m`, `2h`, `1d`) as TTLs in whole milliseconds.

use std::time::Duration;

use serde::Serializer;

use super::MAX_TTL_MS;

/// Parses a delay; the error is the sentence and the hint to show under it.
pub fn parse(text: &str) -> Result<Duration, (String, String)> {
    const HINT: &str = r#"write a number and a unit: "500ms", "30s", "5m", "2h" or "1d""#;
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(("a delay cannot be negative".into(), HINT.into()));
    }
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err((
            format!("delay \"{text}\" has no unit"),
            format!(
                r#"raw numbers are ambiguous (5601000 meant as minutes is 93 minutes); write "{trimmed}ms" or "{trimmed}s""#
            ),
        ));
    }
    let d = humantime::parse_duration(trimmed)
        .map_err(|e| (format!("\"{text}\" is not a duration: {e}"), HINT.to_string()))?;
    if d.is_zero() {
        return Err((
            "a delay must be longer than zero".into(),
            "a zero TTL expires messages on arrival: the retry would not wait at all".into(),
        ));
    }
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err((
            format!("delay \"{text}\" is not a whole number of milliseconds"),
            "RabbitMQ TTLs are in milliseconds".into(),
        ));
    }
    if d.as_millis() > MAX_TTL_MS {
        return Err((
            format!("delay \"{text}\" is longer than RabbitMQ's largest TTL (10 years)"),
            "RabbitMQ refuses an x-message-ttl above 315360000000 ms".into(),
        ));
    }
    Ok(d)
}

/// The shortest exact spelling, in the largest unit that divides the delay: `90s`, `5m`, `1500ms`.
/// It is part of wait queue names, so it must be stable and free of spaces.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let (count, unit) = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)]
        .into_iter()
        .find(|(_, size)| ms.is_multiple_of(*size))
        .map_or((ms, "ms"), |(unit, size)| (ms / size, unit));
    // Pushed, not formatted: every wait queue's name holds its delay, twice a queue compiled.
    let mut text = u64::try_from(count).map_or_else(|_| count.to_string(), |n| n.to_string());
    text.push_str(unit);
    text
}

pub fn serialize_all<S: Serializer>(delays: &[Duration], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(delays.iter().map(|d| format_duration(*d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse("1d").unwrap(), Duration::from_secs(86400));
    }

    #[test]
    fn refuses_what_a_ttl_cannot_be() {
        assert!(parse("0s").unwrap_err().0.contains("longer than zero"));
        assert!(parse("-5s").unwrap_err().0.contains("negative"));
        assert!(parse("5000").unwrap_err().0.contains("no unit"));
        assert!(parse("1us").unwrap_err().0.contains("milliseconds"));
        assert!(parse("4000d").unwrap_err().0.contains("10 years"));
        // RabbitMQ's largest TTL itself is a delay; a millisecond more is not.
        assert_eq!(parse("3650d").unwrap().as_millis(), MAX_TTL_MS);
        assert!(parse("3650d 1ms").unwrap_err().0.contains("10 years"));
        assert!(parse("5 parsecs").unwrap_err().0.contains("not a duration"));
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::from_secs(86400 * 3)), "3d");
    }
}
