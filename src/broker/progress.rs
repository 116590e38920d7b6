//! How far a reading of a vhost has come, told to a thread that waits for the broker to be
//! done with most of it (`ops::Early`): a broker on the machine hopper runs on answers with
//! the CPUs hopper computes on.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The listings a reading of a vhost waits for: exchanges, queues and bindings.
pub const LISTINGS: usize = 3;

/// Shared by the reading, which notes each answer, and whoever waits on it. Cloning shares it.
#[derive(Clone, Default)]
pub struct Progress(Arc<(Mutex<Seen>, Condvar)>);

#[derive(Default)]
struct Seen {
    /// Answers of any request of the reading, the listings' among them.
    answers: usize,
    listings: usize,
    /// The reading has ended, answered or not.
    ended: bool,
}

/// What came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// One of the `LISTINGS`.
    Listing,
    /// A small request beside them (policies, nodes).
    Other,
}

impl Progress {
    fn seen(&self) -> MutexGuard<'_, Seen> {
        // A thread that panicked holding the lock left counts that are still counts.
        self.0.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An answer has come back, a failure too: a failed listing ends the reading.
    pub fn note(&self, answer: Answer) {
        let mut seen = self.seen();
        seen.answers += 1;
        if answer == Answer::Listing {
            seen.listings += 1;
        }
        self.0.1.notify_all();
    }

    /// Marks the reading ended when the returned guard is dropped, however the reading ends
    /// (a panic too): nobody waits on a reading that is over.
    pub fn ends_on_drop(&self) -> EndsOnDrop {
        EndsOnDrop(self.clone())
    }

    /// Returns once every listing but one has come back (the broker then works on the last
    /// alone), once the reading has ended, or once `patience` has passed without any answer at
    /// all (a broker that does not answer is not answering with the CPUs).
    pub fn wait_for_the_last_listing(&self, patience: Duration) {
        let deadline = Instant::now() + patience;
        let mut seen = self.seen();
        while seen.listings < LISTINGS - 1 && !seen.ended {
            let now = Instant::now();
            if seen.answers == 0 && now >= deadline {
                return;
            }
            // Once anything has answered, the broker is at work: its listings come, or fail, in
            // the request timeout. Woken by each answer either way.
            let wait = if seen.answers == 0 { deadline - now } else { Duration::from_secs(1) };
            seen = self.0.1.wait_timeout(seen, wait).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
    }
}

/// See [`Progress::ends_on_drop`].
pub struct EndsOnDrop(Progress);

impl Drop for EndsOnDrop {
    fn drop(&mut self) {
        self.0.seen().ended = true;
        self.0.0.1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn waits_for_all_listings_but_the_last() {
        let progress = Progress::default();
        let reading = progress.clone();
        let answers = std::thread::spawn(move || {
            reading.note(Answer::Other);
            reading.note(Answer::Listing);
            reading.note(Answer::Listing);
        });
        // Returns only once two listings are in: the other answers do not end the wait.
        progress.wait_for_the_last_listing(LONG);
        assert_eq!(progress.seen().listings, LISTINGS - 1);
        answers.join().unwrap();
    }

    #[test]
    fn a_reading_that_ends_ends_the_wait() {
        let progress = Progress::default();
        let reading = progress.clone();
        let ends = std::thread::spawn(move || {
            let _ended = reading.ends_on_drop();
            reading.note(Answer::Other);
            panic!("the reading failed");
        });
        progress.wait_for_the_last_listing(LONG);
        assert!(progress.seen().ended);
        assert!(ends.join().is_err());
    }

    #[test]
    fn a_broker_that_does_not_answer_is_not_waited_for() {
        let progress = Progress::default();
        progress.wait_for_the_last_listing(Duration::from_millis(1));
        let seen = progress.seen();
        assert_eq!((seen.answers, seen.ended), (0, false));
    }
}
