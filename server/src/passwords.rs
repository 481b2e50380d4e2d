//! Console passwords: argon2id, always off the async runtime (`spawn_blocking`). A sign-in for
//! an unknown email verifies against a dummy hash, so it takes as long as a real one and the
//! timing does not reveal which emails exist.
//!
//! Sign-ins verify through [`Hashers`]: a fixed number of threads in the idle CPU class,
//! each computing in a memory block allocated once and reused. Letting argon2 allocate its
//! 19 MiB per call on tokio's blocking threads left that much cached in the allocator of each
//! thread that ever ran one (glibc keeps a freed block of that size per arena): a crowd of
//! sign-ins grew the process to 270 MiB and kept it there (`sign_in_bench`, before this).

use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, Block, Params};
use rand::Rng;

/// The shortest password accepted anywhere (the console says the same while you type).
pub const MIN_PASSWORD_CHARS: usize = app::tenants::MIN_PASSWORD_CHARS;

static DUMMY_HASH: LazyLock<String> = LazyLock::new(|| hash_now(&generate()).unwrap_or_default());

fn hash_now(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// New passwords are hashed one at a time, whoever asks (an operator, a tenant admin adding
/// an admin, a password change): a crowd of such requests queues here instead of taking every
/// core and 19 MiB each.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Hashes `password` (argon2id, default parameters) into a PHC string, after the new-password
/// hashes queued before it ([`HASHING`]).
pub async fn hash(password: String) -> anyhow::Result<String> {
    let _turn = HASHING.acquire().await?;
    let hashed = tokio::task::spawn_blocking(move || hash_now(&password)).await?;
    hashed.map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))
}

/// Whether `password` matches `stored`. With no stored hash (unknown user) the dummy hash is
/// verified instead and the answer is always false.
pub async fn verify(password: String, stored: Option<String>) -> bool {
    let known = stored.is_some();
    let stored = stored.unwrap_or_else(|| DUMMY_HASH.clone());
    let matched = tokio::task::spawn_blocking(move || {
        PasswordHash::new(&stored).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false);
    known && matched
}

/// The largest argon2 memory a stored hash may ask for (64 MiB); the hashes Sluice writes use
/// 19 MiB, so anything larger is not ours and is refused rather than allocated.
const MAX_BLOCKS: usize = 64 * 1024;

/// Verifies `password` against the PHC string `stored`, computing in `memory` (grown to the
/// hash's size once, then reused).
fn verify_in(password: &[u8], stored: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        argon2::Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = match parsed.version.map(argon2::Version::try_from).transpose() {
        Ok(version) => version.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut salt_bytes = [0_u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let blocks = params.block_count();
    if blocks > MAX_BLOCKS {
        return false;
    }
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut computed = vec![0_u8; expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password, salt, &mut computed, &mut memory[..blocks])
        .is_ok()
        // `Output`'s equality is constant-time.
        && Output::new(&computed).is_ok_and(|computed| computed == expected)
}

/// Why a verification did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every password hasher stayed busy for the whole wait")]
pub struct Busy;

/// One verification for a hasher thread: the password, the stored hash (none: the dummy),
/// and where to send the answer.
type Job = (String, Option<String>, tokio::sync::oneshot::Sender<bool>);

/// A fixed number of password hashers: threads of their own in the idle CPU class
/// ([`lower_priority`]), each with argon2's memory allocated once and reused. A sign-in waits
/// for a free one for a bounded time. A hash takes a core only while nothing else wants it,
/// so `/v1/check` keeps its latency while sign-ins arrive. The threads end when the
/// last clone is dropped. Cloning shares them.
#[derive(Debug, Clone)]
pub struct Hashers {
    permits: Arc<tokio::sync::Semaphore>,
    jobs: std::sync::mpsc::Sender<Job>,
}

impl Hashers {
    /// `count` hasher threads (at least 1).
    pub fn new(count: usize) -> Self {
        let count = count.max(1);
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..count {
            let queue = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name(format!("sluice-hasher-{i}"))
                .spawn(move || hasher_thread(&queue));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a password hasher thread");
            }
        }
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(count)),
            jobs,
        }
    }

    /// Whether `password` matches `stored` (with no stored hash, the dummy hash is verified and
    /// the answer is false), once a hasher is free; [`Busy`] when none is within `wait`.
    pub async fn verify(
        &self,
        password: String,
        stored: Option<String>,
        wait: Duration,
    ) -> Result<bool, Busy> {
        let _permit = tokio::time::timeout(wait, self.permits.acquire())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(Busy)?;
        let known = stored.is_some();
        let (answer, answered) = tokio::sync::oneshot::channel();
        if self.jobs.send((password, stored, answer)).is_err() {
            return Err(Busy);
        }
        // Awaited for an unknown email too: its dummy hash is what makes it take as long as a
        // known one (and what holds the permit meanwhile), so it must not return before it.
        // A hasher that died (it cannot panic on bad input; see `verify_in`) answers false.
        let matched = answered.await.unwrap_or(false);
        Ok(known && matched)
    }
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class: it runs only on CPU time no other
/// thread wants, and any other thread that wakes up takes the CPU from it at once. Elsewhere
/// (or if that fails) it takes the lowest nice value instead.
fn lower_priority() {
    use thread_priority::{
        set_current_thread_priority, set_thread_priority_and_policy, thread_native_id,
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle).is_ok() {
        return;
    }
    if let Err(e) = set_current_thread_priority(ThreadPriority::Min) {
        tracing::warn!(error = ?e, "cannot lower a password hasher's CPU priority");
    }
}

/// A hasher thread: lowest priority, one block of memory, jobs until the queue closes.
fn hasher_thread(queue: &Mutex<std::sync::mpsc::Receiver<Job>>) {
    lower_priority();
    let mut memory: Vec<Block> = Vec::new();
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((password, stored, answer)) = job else {
            return;
        };
        let stored = stored.unwrap_or_else(|| DUMMY_HASH.clone());
        let _ = answer.send(verify_in(password.as_bytes(), &stored, &mut memory));
    }
}

/// A random 20-character password (letters and digits), for bootstrap accounts.
pub fn generate() -> String {
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = OsRng;
    (0..20)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_only_its_password() {
        let hashed = hash("correct horse battery".into()).await.unwrap();
        assert!(hashed.starts_with("$argon2id$"));
        assert!(verify("correct horse battery".into(), Some(hashed.clone())).await);
        assert!(!verify("wrong".into(), Some(hashed)).await);
        assert!(!verify("anything".into(), None).await);
    }

    #[tokio::test]
    async fn the_hashers_verify_like_argon2() {
        let hashed = hash("correct horse battery".into()).await.unwrap();
        let hashers = Hashers::new(1);
        let wait = Duration::from_secs(5);
        for _ in 0..2 {
            assert_eq!(
                hashers
                    .verify("correct horse battery".into(), Some(hashed.clone()), wait)
                    .await,
                Ok(true)
            );
            assert_eq!(
                hashers
                    .verify("wrong".into(), Some(hashed.clone()), wait)
                    .await,
                Ok(false)
            );
            assert_eq!(hashers.verify("x".into(), None, wait).await, Ok(false));
            assert_eq!(
                hashers
                    .verify("x".into(), Some("not a hash".into()), wait)
                    .await,
                Ok(false)
            );
        }
    }

    #[test]
    fn verifying_reuses_one_block_of_memory_of_argon2s_size() {
        let hashed = hash_now("correct horse battery").unwrap();
        let mut memory = Vec::new();
        assert!(verify_in(b"correct horse battery", &hashed, &mut memory));
        assert_eq!(memory.len(), Params::default().block_count());
        let address = memory.as_ptr();
        assert!(!verify_in(b"wrong", &hashed, &mut memory));
        assert_eq!(
            memory.as_ptr(),
            address,
            "the same memory, not a new allocation"
        );
    }

    #[test]
    fn a_hasher_thread_runs_in_the_idle_cpu_class() {
        let hashers = Hashers::new(1);
        // The threads end when the last clone is dropped: this one keeps them until they are
        // read below (the probe's own clone goes with the probe).
        let kept = hashers.clone();
        // An unknown email's verification returns only once a hasher has run its dummy hash
        // (its timing must be a known one's), so by then the thread has its name and its
        // class. When it did not wait, this test found no hasher now and then (a thread not
        // yet started, still named after this test).
        let (tx, rx) = std::sync::mpsc::channel();
        // A job that reports the priority of the thread that runs it.
        let probe = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // SCHED_IDLE runs only when nothing else wants the CPU: on a machine saturated by
            // a build, the job may wait for many seconds (it failed at 5 s that way).
            runtime.block_on(async {
                hashers
                    .verify("x".into(), None, Duration::from_secs(120))
                    .await
                    .unwrap();
            });
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
        probe.join().unwrap();
        let policies = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(Result::ok)
            .filter_map(|task| {
                let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
                let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
                // Field 41 of stat is the scheduling policy (5: SCHED_IDLE); the command may
                // hold spaces, so count from the closing parenthesis (field 3 comes first).
                let after = stat.rsplit_once(')')?.1;
                let policy: i32 = after.split_whitespace().nth(38)?.parse().ok()?;
                comm.trim().starts_with("sluice-hasher").then_some(policy)
            })
            .collect::<Vec<_>>();
        assert!(!policies.is_empty(), "a hasher thread is running");
        assert!(policies.iter().all(|p| *p == 5), "{policies:?}");
        drop(kept);
    }

    #[tokio::test]
    async fn with_every_hasher_busy_a_verification_gives_up_after_its_wait() {
        let hashers = Hashers::new(1);
        let _held = hashers.permits.acquire().await.unwrap();
        let answer = hashers
            .verify("x".into(), None, Duration::from_millis(20))
            .await;
        assert_eq!(answer, Err(Busy));
    }

    #[test]
    fn generated_passwords_are_long_and_different() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.chars().count(), 20);
        assert_ne!(a, b);
    }
}
