//! hopper started in the background and stopped with SIGKILL: the runs a test kills at a random
//! point (nothing may be lost), and the runs that must end within a limit (nothing may make
//! hopper wait forever).

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, Broker};

/// `hopper ARGS` started with exactly these connection variables, as `support::hopper_env` runs
/// it, its output piped.
pub fn hopper(args: &[&str], env: &[(&str, &str)]) -> Child {
    support::hopper_command(args, env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hopper")
}

/// The same, pointed at `broker`.
pub fn hopper_on(broker: Broker, args: &[&str]) -> Child {
    hopper(args, &[("HOPPER_AMQP_URL", broker.amqp()), ("HOPPER_MANAGEMENT_URL", broker.management())])
}

/// How a run in the background ended, with what it wrote.
pub enum End {
    /// By itself.
    Exited(Output),
    /// SIGKILLed at its deadline.
    Killed(Output),
}

/// Waits for `child` without blocking the test's runtime (a publisher may run beside it); at
/// `deadline`, if there is one, SIGKILLs it instead.
pub async fn kill_at(mut child: Child, deadline: Option<Instant>) -> End {
    loop {
        if let Some(killed) = ended(&mut child, deadline) {
            return end(child, killed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for `child`, and SIGKILLs it once `limit` has passed.
pub fn within(mut child: Child, limit: Duration) -> End {
    let deadline = Some(Instant::now() + limit);
    loop {
        if let Some(killed) = ended(&mut child, deadline) {
            return end(child, killed);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `Some(killed)` once the child has ended, by itself or by the SIGKILL sent here at `deadline`.
fn ended(child: &mut Child, deadline: Option<Instant>) -> Option<bool> {
    if child.try_wait().unwrap().is_some() {
        return Some(false);
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        // `Child::kill` is SIGKILL on Unix: no handler runs, as when a machine dies.
        let _ = child.kill();
        return Some(true);
    }
    None
}

fn end(child: Child, killed: bool) -> End {
    let out = child.wait_with_output().unwrap();
    if killed { End::Killed(out) } else { End::Exited(out) }
}

/// A small deterministic generator, seeded from the clock and printed, so that a failing run's
/// kill points can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_clock() -> Rng {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
        eprintln!("kill seed {seed}");
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
