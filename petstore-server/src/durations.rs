//! Durations as the flags' defaults, the README and the server's messages
//! write them.

use std::time::Duration;

/// A duration as the flags' defaults and the README write it: a whole
/// number of its largest unit (`24h`, `30d`, `5m`, `250ms`), with days only
/// from two on, so that a day reads as the `24h` the contract promises;
/// else, for what a millisecond does not divide, humantime's `1ms 500us`.
pub fn duration_text(value: Duration) -> String {
    const UNITS: [(&str, u128); 5] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let millis = value.as_millis();
    let exact = millis > 0 && value.subsec_nanos().is_multiple_of(1_000_000);
    let largest = UNITS.iter().find(|&&(unit, size)| {
        exact && millis.is_multiple_of(size) && (unit != "d" || millis >= 2 * size)
    });
    match largest {
        Some((unit, size)) => format!("{}{unit}", millis / size),
        None => humantime::format_duration(value).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_printed_in_their_largest_whole_unit() {
        for (text, printed) in [
            ("24h", "24h"),
            ("1d", "24h"),
            ("2d", "2d"),
            ("7days 3h", "171h"),
            ("90m", "90m"),
            ("1h 30s", "3630s"),
            ("1500ms", "1500ms"),
            ("0s", "0s"),
            ("1ms 500us", "1ms 500us"),
        ] {
            let value = humantime::parse_duration(text).unwrap();
            assert_eq!(duration_text(value), printed, "{text}");
            assert_eq!(humantime::parse_duration(printed), Ok(value), "{text}");
        }
    }
}
