//! Retry strategies for steps: how many attempts, how long between them, and which
//! errors are worth another attempt.
//!
//! The delay is computed here, purely, from the attempt number and a random draw; the
//! engine turns it into a durable timer (the run suspends and a wake-up resumes it), so
//! no Lambda sits idle while it waits.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::ErrorInfo;

/// How delays grow between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Backoff {
    /// `initial × multiplier^(attempt − 1)`, capped.
    Exponential {
        /// Growth factor per attempt (≥ 1).
        multiplier: f64,
    },
    /// The same delay every time.
    Fixed,
}

/// How much randomness to add to a delay, so that many runs retrying at once spread out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Jitter {
    /// The computed delay, exactly.
    None,
    /// Uniform in `[0, delay]` ("full jitter").
    Full,
    /// Uniform in `[delay / 2, delay]`.
    Half,
}

/// Which errors get another attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryOn {
    /// Errors classified retryable (timeouts, 429, 5xx, any error not marked fatal).
    Retryable,
    /// Only errors of these kinds, whatever their classification.
    Kinds(Vec<String>),
}

/// A step's retry strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryStrategy {
    /// Attempts in all, the first included (1 = no retries).
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub initial_delay: Duration,
    /// No delay is longer than this.
    pub max_delay: Duration,
    /// How delays grow.
    pub backoff: Backoff,
    /// Randomness added to each delay.
    pub jitter: Jitter,
    /// Which errors are retried.
    pub retry_on: RetryOn,
}

impl Default for RetryStrategy {
    /// As in AWS Lambda durable functions: 6 attempts, 5 s initial delay, ×2, capped at
    /// 60 s, full jitter, retryable errors only.
    fn default() -> Self {
        RetryStrategy {
            max_attempts: 6,
            initial_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(60),
            backoff: Backoff::Exponential { multiplier: 2.0 },
            jitter: Jitter::Full,
            retry_on: RetryOn::Retryable,
        }
    }
}

impl RetryStrategy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        RetryStrategy {
            max_attempts: 1,
            ..RetryStrategy::default()
        }
    }

    /// Exponential backoff with the default delays and `max_attempts` attempts.
    pub fn exponential(max_attempts: u32) -> Self {
        RetryStrategy {
            max_attempts: max_attempts.max(1),
            ..RetryStrategy::default()
        }
    }

    /// `max_attempts` attempts, `delay` apart, no jitter.
    pub fn fixed(max_attempts: u32, delay: Duration) -> Self {
        RetryStrategy {
            max_attempts: max_attempts.max(1),
            initial_delay: delay,
            max_delay: delay,
            backoff: Backoff::Fixed,
            jitter: Jitter::None,
            retry_on: RetryOn::Retryable,
        }
    }

    /// With this initial delay.
    pub fn initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d;
        self
    }

    /// With this cap on delays.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// With this growth factor (exponential backoff).
    pub fn multiplier(mut self, m: f64) -> Self {
        self.backoff = Backoff::Exponential {
            multiplier: m.max(1.0),
        };
        self
    }

    /// With this jitter.
    pub fn jitter(mut self, j: Jitter) -> Self {
        self.jitter = j;
        self
    }

    /// Retry only errors of these kinds.
    pub fn retry_on_kinds<I: IntoIterator<Item = S>, S: Into<String>>(mut self, kinds: I) -> Self {
        self.retry_on = RetryOn::Kinds(kinds.into_iter().map(Into::into).collect());
        self
    }

    /// Whether attempt number `attempt` (from 1), which failed with `error`, gets
    /// another attempt.
    pub fn should_retry(&self, attempt: u32, error: &ErrorInfo) -> bool {
        if attempt >= self.max_attempts {
            return false;
        }
        match &self.retry_on {
            RetryOn::Retryable => error.retryable,
            RetryOn::Kinds(kinds) => kinds.contains(&error.kind),
        }
    }

    /// The delay before the attempt after `attempt` (from 1) without jitter.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let secs = match self.backoff {
            Backoff::Fixed => self.initial_delay.as_secs_f64(),
            Backoff::Exponential { multiplier } => {
                self.initial_delay.as_secs_f64() * multiplier.max(1.0).powi(exponent)
            }
        };
        let capped = secs.min(self.max_delay.as_secs_f64());
        Duration::from_secs_f64(if capped.is_finite() {
            capped.max(0.0)
        } else {
            self.max_delay.as_secs_f64()
        })
    }

    /// The delay before the attempt after `attempt`, with jitter drawn from `unit`, a
    /// number in `[0, 1)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let base = self.base_delay(attempt);
        let unit = unit.clamp(0.0, 1.0);
        match self.jitter {
            Jitter::None => base,
            Jitter::Full => base.mul_f64(unit),
            Jitter::Half => base / 2 + (base / 2).mul_f64(unit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strategy() -> impl Strategy<Value = RetryStrategy> {
        (
            1u32..20,
            0u64..120_000,
            0u64..3_600_000,
            1.0f64..5.0,
            prop_oneof![Just(Jitter::None), Just(Jitter::Full), Just(Jitter::Half)],
            any::<bool>(),
        )
            .prop_map(|(max_attempts, initial, cap, multiplier, jitter, fixed)| {
                RetryStrategy {
                    max_attempts,
                    initial_delay: Duration::from_millis(initial),
                    max_delay: Duration::from_millis(cap),
                    backoff: if fixed {
                        Backoff::Fixed
                    } else {
                        Backoff::Exponential { multiplier }
                    },
                    jitter,
                    retry_on: RetryOn::Retryable,
                }
            })
    }

    #[test]
    fn default_matches_aws_durable_functions() {
        let s = RetryStrategy::default();
        assert_eq!(s.max_attempts, 6);
        assert_eq!(s.base_delay(1), Duration::from_secs(5));
        assert_eq!(s.base_delay(2), Duration::from_secs(10));
        assert_eq!(s.base_delay(4), Duration::from_secs(40));
        assert_eq!(s.base_delay(5), Duration::from_secs(60));
        assert_eq!(s.jitter, Jitter::Full);
    }

    proptest! {
        #[test]
        fn delay_never_exceeds_the_cap(s in strategy(), attempt in 1u32..100, unit in 0.0f64..1.0) {
            prop_assert!(s.delay(attempt, unit) <= s.max_delay + Duration::from_nanos(1));
        }

        #[test]
        fn base_delay_never_shrinks_with_attempts(s in strategy(), attempt in 1u32..100) {
            prop_assert!(s.base_delay(attempt + 1) >= s.base_delay(attempt));
        }

        #[test]
        fn jitter_stays_within_its_band(s in strategy(), attempt in 1u32..50, unit in 0.0f64..1.0) {
            let base = s.base_delay(attempt);
            let d = s.delay(attempt, unit);
            prop_assert!(d <= base + Duration::from_nanos(1));
            match s.jitter {
                Jitter::None => prop_assert_eq!(d, base),
                Jitter::Half => prop_assert!(d + Duration::from_nanos(1) >= base / 2),
                Jitter::Full => {}
            }
        }

        #[test]
        fn fixed_backoff_is_constant_below_the_cap(initial in 0u64..60_000, attempt in 1u32..50) {
            let s = RetryStrategy::fixed(10, Duration::from_millis(initial));
            prop_assert_eq!(s.delay(attempt, 0.5), Duration::from_millis(initial));
        }

        #[test]
        fn attempts_are_bounded_by_max_attempts(s in strategy(), attempt in 1u32..100) {
            let err = ErrorInfo::new("timeout", "t", true);
            prop_assert_eq!(s.should_retry(attempt, &err), attempt < s.max_attempts);
        }

        #[test]
        fn fatal_errors_are_never_retried(s in strategy(), attempt in 1u32..100) {
            prop_assert!(!s.should_retry(attempt, &ErrorInfo::new("validation", "bad", false)));
        }

        #[test]
        fn named_kinds_are_retried_whatever_their_class(attempt in 1u32..5, retryable in any::<bool>()) {
            let s = RetryStrategy::exponential(5).retry_on_kinds(["rate_limited"]);
            prop_assert!(s.should_retry(attempt, &ErrorInfo::new("rate_limited", "slow down", retryable)));
            prop_assert!(!s.should_retry(attempt, &ErrorInfo::new("timeout", "t", true)));
        }
    }
}
