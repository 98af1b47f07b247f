//! Exponential backoff between retries: `min`, doubled after each failure
//! up to `max`, back to `min` after a success.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        let max = max.max(min);
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The wait before the next try.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000));
        let waits: Vec<_> = (0..6).map(|_| b.next_wait()).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
        // A cap below the start is the start.
        let mut b = Backoff::new(ms(500), ms(10));
        assert_eq!((b.next_wait(), b.next_wait()), (ms(500), ms(500)));
    }
}
