//! What a key may spend: a sustained rate, a burst above it, and a cap on
//! requests in flight. The types alone, shared by the keys, their storage,
//! the command line and the rate limiter (`ratelimit/`), which enforces them.

use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

/// The unit of a [`Rate`]: what `keys create --rate 50/s` says after the
/// slash, and what is stored (as seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Per {
    /// `/s`.
    Second,
    /// `/min`.
    Minute,
    /// `/h`.
    Hour,
}

impl Per {
    /// Its length in seconds.
    pub fn seconds(self) -> u32 {
        match self {
            Per::Second => 1,
            Per::Minute => 60,
            Per::Hour => 3600,
        }
    }

    /// The unit of `seconds`, as stored.
    pub fn of_seconds(seconds: i64) -> Option<Per> {
        [Per::Second, Per::Minute, Per::Hour]
            .into_iter()
            .find(|per| i64::from(per.seconds()) == seconds)
    }

    fn suffix(self) -> &'static str {
        match self {
            Per::Second => "s",
            Per::Minute => "min",
            Per::Hour => "h",
        }
    }
}

/// A sustained rate: `requests` per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// How many requests…
    pub requests: NonZeroU32,
    /// …per this long.
    pub per: Per,
}

impl Rate {
    /// `requests` per second.
    pub fn per_second(requests: NonZeroU32) -> Rate {
        Rate {
            requests,
            per: Per::Second,
        }
    }

    /// The time between two requests at this rate: GCRA's emission interval.
    pub fn interval(self) -> Duration {
        Duration::from_secs(u64::from(self.per.seconds())) / self.requests.get()
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.requests, self.per.suffix())
    }
}

impl FromStr for Rate {
    type Err = String;

    /// `50/s`, `600/min` or `10/h`.
    fn from_str(text: &str) -> Result<Rate, String> {
        let expected = || format!("{text:?}: expected a rate such as 50/s, 600/min or 10/h");
        let (count, unit) = text.trim().split_once('/').ok_or_else(expected)?;
        let requests = count.trim().parse::<NonZeroU32>().map_err(|_| expected())?;
        let per = match unit.trim() {
            "s" | "sec" => Per::Second,
            "min" | "m" => Per::Minute,
            "h" | "hour" => Per::Hour,
            _ => return Err(expected()),
        };
        Ok(Rate { requests, per })
    }
}

/// A budget in full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// The sustained rate.
    pub rate: Rate,
    /// How many requests may come at once above it (GCRA's burst: a client
    /// idle long enough may send this many back to back).
    pub burst: NonZeroU32,
    /// How many of its requests may be in progress at once.
    pub in_flight: NonZeroU32,
}

/// What one key sets of its own budget (`keys create --rate --burst
/// --in-flight`, `keys limits`); what it leaves unset is the configured
/// default, so that changing the default changes every such key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyLimits {
    /// Its own rate.
    pub rate: Option<Rate>,
    /// Its own burst.
    pub burst: Option<NonZeroU32>,
    /// Its own cap on requests in flight.
    pub in_flight: Option<NonZeroU32>,
}

impl KeyLimits {
    /// The key's budget, its own settings over `default`.
    pub fn over(self, default: Budget) -> Budget {
        Budget {
            rate: self.rate.unwrap_or(default.rate),
            burst: self.burst.unwrap_or(default.burst),
            in_flight: self.in_flight.unwrap_or(default.in_flight),
        }
    }

    /// `self` with what `change` sets replaced (`None` in `change` keeps
    /// the setting; `Some(None)` returns it to the default).
    pub fn changed(self, change: LimitsChange) -> KeyLimits {
        KeyLimits {
            rate: change.rate.unwrap_or(self.rate),
            burst: change.burst.unwrap_or(self.burst),
            in_flight: change.in_flight.unwrap_or(self.in_flight),
        }
    }
}

/// A change to a key's [`KeyLimits`]: for each setting, nothing (kept),
/// `Some(None)` (back to the default) or `Some(Some(value))`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitsChange {
    /// The rate.
    pub rate: Option<Option<Rate>>,
    /// The burst.
    pub burst: Option<Option<NonZeroU32>>,
    /// The cap on requests in flight.
    pub in_flight: Option<Option<NonZeroU32>>,
}

impl std::fmt::Display for KeyLimits {
    /// `rate 50/s, burst 100, in-flight default`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn or_default(value: Option<impl std::fmt::Display>) -> String {
            value.map_or_else(|| "default".to_owned(), |value| value.to_string())
        }
        write!(
            f,
            "rate {}, burst {}, in-flight {}",
            or_default(self.rate),
            or_default(self.burst),
            or_default(self.in_flight)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_written_and_space_their_requests() {
        for (text, shown, interval_ms) in [
            ("50/s", "50/s", 20),
            ("600/min", "600/min", 100),
            ("10/h", "10/h", 360_000),
            (" 4 / sec ", "4/s", 250),
        ] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!(rate.to_string(), shown);
            assert_eq!(rate.interval(), Duration::from_millis(interval_ms));
        }
        for bad in ["", "50", "0/s", "-1/s", "50/day", "x/s", "50/"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_key_sets_what_it_sets_and_the_default_gives_the_rest() {
        let n = |n| NonZeroU32::new(n).unwrap();
        let default = Budget {
            rate: Rate::per_second(n(100)),
            burst: n(200),
            in_flight: n(32),
        };
        let own = KeyLimits {
            burst: Some(n(5)),
            ..KeyLimits::default()
        };
        assert_eq!(
            own.over(default),
            Budget {
                burst: n(5),
                ..default
            }
        );
        let changed = own.changed(LimitsChange {
            burst: Some(None),
            in_flight: Some(Some(n(2))),
            ..LimitsChange::default()
        });
        assert_eq!(
            changed,
            KeyLimits {
                in_flight: Some(n(2)),
                ..KeyLimits::default()
            }
        );
        assert_eq!(
            changed.to_string(),
            "rate default, burst default, in-flight 2"
        );
    }
}
