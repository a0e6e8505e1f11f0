//! `--metrics-listen ADDRESS`: bench's, frontier's and demo's scheduler
//! metrics over HTTP.
//!
//! The first `tailguard` run of the command starts one
//! [`tailguard::MetricsServer`] on the address (loopback only) and prints its
//! URL on standard error; each run publishes its scheduler here, and a scrape
//! renders that scheduler's statistics at that moment in the OpenMetrics text
//! format. A published scheduler stays published (and its engine up) until the
//! next run replaces it, so after a run a scrape shows its final counters,
//! the ones bench's `--json` prints. With `--metrics-linger-s N` the command
//! keeps serving them for N seconds after its output, for a last scrape.

use crate::error::CliError;
use crate::lifecycle;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailguard::{MetricsServer, Scheduler};

struct Published {
    /// Kept to serve until the process ends.
    _server: MetricsServer,
    scheduler: Arc<Mutex<Option<Scheduler>>>,
    url: String,
    linger: Duration,
}

static PUBLISHED: Mutex<Option<Published>> = Mutex::new(None);

/// Serves `scheduler`'s metrics on `listen` from now on (nothing when
/// `listen` is `None`); starts the server on the first call.
pub fn publish(listen: Option<SocketAddr>, linger_s: u64, scheduler: &Scheduler) -> io::Result<()> {
    let Some(listen) = listen else {
        return Ok(());
    };
    let mut published = PUBLISHED.lock().expect("lock poisoned");
    if published.is_none() {
        let slot: Arc<Mutex<Option<Scheduler>>> = Arc::new(Mutex::new(None));
        let source = slot.clone();
        let server = MetricsServer::start(listen, move || {
            match source.lock().expect("lock poisoned").as_ref() {
                Some(scheduler) => scheduler
                    .stats()
                    .map(|stats| tailguard::render_openmetrics(&stats)),
                None => Err(io::Error::other("no tailguard run has started yet")),
            }
        })?;
        let url = format!("http://{}/metrics", server.local_address());
        eprintln!("metrics: serving {url}");
        *published = Some(Published {
            _server: server,
            scheduler: slot,
            url,
            linger: Duration::from_secs(linger_s),
        });
    }
    let published = published.as_ref().expect("started above");
    // The scheduler it replaces shuts down when this drops it.
    let previous = published
        .scheduler
        .lock()
        .expect("lock poisoned")
        .replace(scheduler.clone());
    drop(previous);
    Ok(())
}

/// How long the linger sleeps between looks for a stop signal.
const LINGER_STEP: Duration = Duration::from_millis(100);

/// After the command's output: keeps serving the last run's metrics for the
/// `--metrics-linger-s` it asked for. SIGINT, SIGTERM or SIGHUP ends the
/// wait within [`LINGER_STEP`] with the interrupted error, so the process
/// exits as an interrupted run does, with 128 + the signal.
pub fn linger() -> Result<(), CliError> {
    let (url, linger) = match PUBLISHED.lock().expect("lock poisoned").as_ref() {
        Some(published) if !published.linger.is_zero() => (published.url.clone(), published.linger),
        _ => return Ok(()),
    };
    let _ = writeln!(
        io::stderr(),
        "metrics: the run is over; serving its final counters at {url} for {} s",
        linger.as_secs()
    );
    wait_unless_interrupted(linger)
}

/// Sleeps `linger` in [`LINGER_STEP`]s; the interrupted error once a stop
/// signal has arrived.
fn wait_unless_interrupted(linger: Duration) -> Result<(), CliError> {
    let started = Instant::now();
    loop {
        if lifecycle::interrupted() {
            return Err(CliError::interrupted());
        }
        let left = linger.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(LINGER_STEP));
    }
}
