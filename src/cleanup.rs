//! What a run must undo if it is interrupted: on SIGINT or SIGTERM every registered step runs,
//! newest first, then the process exits as the signal would (130, 143). The scratch schemas of
//! `store::postgres` and the processes and folders of `e2e` register here, so one handler
//! undoes both.

use std::sync::{Mutex, MutexGuard, Once};

type Step = Box<dyn Fn() + Send>;

static STEPS: Mutex<Vec<(u64, Step)>> = Mutex::new(Vec::new());
static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
static INSTALLED: Once = Once::new();

fn steps() -> MutexGuard<'static, Vec<(u64, Step)>> {
    STEPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `step` if the process is interrupted before [`Registered`] is dropped.
pub fn on_interrupt(step: impl Fn() + Send + 'static) -> Registered {
    install();
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    steps().push((id, Box::new(step)));
    Registered(id)
}

/// A registered step; dropping it unregisters the step (the run undid it itself).
#[must_use = "dropping it unregisters the step at once"]
pub struct Registered(u64);

impl Drop for Registered {
    fn drop(&mut self) {
        steps().retain(|(id, _)| *id != self.0);
    }
}

fn install() {
    INSTALLED.call_once(|| {
        let Ok(mut signals) =
            signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])
        else {
            return;
        };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                // Held until exit: nothing new is registered (or undone twice) meanwhile.
                let steps = steps();
                for (_, step) in steps.iter().rev() {
                    step();
                }
                std::process::exit(128 + signal);
            }
        });
    });
}
