//! The work queue of every controller (the [`crate::controller`] runner
//! drains it).
//!
//! Upstream's workqueue semantics (one entry per key however often it is
//! added, never two workers on one key, a key changed while it is being
//! worked on goes round again), served in arrival order, with two lanes:
//! changes seen by a watch go to the **fresh** lane, retries and resyncs to
//! the **background** lane. A worker takes fresh work first, so the first
//! object of a burst is served first and a new Service's first Ensure never
//! waits behind other Services' retries. A background item that has been
//! due for longer than [`AGING`] goes first, so a long burst cannot starve
//! retries.
//!
//! kube-runtime's `Controller` schedules through a timer wheel and a hash
//! set, which serves a burst in no particular order (measured: the first
//! quarter of a 1,000-Service burst waited longest); this replaces it for
//! every controller (docs/architecture.md: what belongs upstream).
//!
//! The queue is also the single retry state of a key: how many times in a
//! row it failed ([`WorkQueue::failed`]), forgotten on success.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a due retry or resync may wait behind fresh work before it
/// goes first.
pub const AGING: Duration = Duration::from_secs(5);

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
    /// False for [`Action::not_yet`]: the key's failures in a row stand.
    attempted: bool,
}

impl Action {
    /// Run again after `delay` (sooner if the object changes).
    pub const fn requeue(delay: Duration) -> Self {
        Action {
            requeue_after: Some(delay),
            attempted: true,
        }
    }

    /// Run again only when the object changes.
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
            attempted: true,
        }
    }

    /// Nothing was attempted: the retry of an earlier failure is not due
    /// for `delay`. Unlike a success, this keeps the key's failures in a
    /// row, so the next failure backs off further.
    pub const fn not_yet(delay: Duration) -> Self {
        Action {
            requeue_after: Some(delay),
            attempted: false,
        }
    }

    /// When to run again unless the object changes first.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// Whether the reconcile attempted anything (see [`Action::not_yet`]).
    pub const fn attempted(&self) -> bool {
        self.attempted
    }
}

/// Where an item waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// Retries and resyncs.
    Background,
    /// Changes seen by a watch.
    Fresh,
}

#[derive(Debug)]
struct Queued {
    lane: Lane,
    /// Tells a deque entry from a stale one left by a promotion.
    generation: u64,
    /// When it became due: for aging and the queue-duration metric.
    since: Instant,
}

/// The queue's state, without I/O or clocks of its own: every operation
/// takes `now`.
#[derive(Debug)]
struct Queue<K> {
    fresh: VecDeque<(K, u64)>,
    background: VecDeque<(K, u64)>,
    queued: HashMap<K, Queued>,
    processing: HashSet<K>,
    /// Added while processing: goes round again, in this lane, when done.
    dirty: HashMap<K, Lane>,
    timers: BTreeMap<(Instant, u64), K>,
    timer_of: HashMap<K, (Instant, u64)>,
    next_generation: u64,
    /// Failures in a row, per key: the retry state.
    failures: HashMap<K, u32>,
}

impl<K> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            fresh: VecDeque::new(),
            background: VecDeque::new(),
            queued: HashMap::new(),
            processing: HashSet::new(),
            dirty: HashMap::new(),
            timers: BTreeMap::new(),
            timer_of: HashMap::new(),
            next_generation: 0,
            failures: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Queue<K> {
    fn generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// Adds `key` now. Returns whether a worker has something new to take.
    fn add(&mut self, key: K, lane: Lane, now: Instant) -> bool {
        // Running now replaces any later run already scheduled.
        if let Some(at) = self.timer_of.remove(&key) {
            self.timers.remove(&at);
        }
        self.enqueue(key, lane, now)
    }

    fn enqueue(&mut self, key: K, lane: Lane, since: Instant) -> bool {
        if self.processing.contains(&key) {
            let d = self.dirty.entry(key).or_insert(lane);
            *d = (*d).max(lane);
            return false;
        }
        let generation = self.generation();
        match self.queued.get_mut(&key) {
            Some(q) if q.lane >= lane => return false,
            Some(q) => {
                // A retry that changed: fresh work now, at the back.
                q.lane = lane;
                q.generation = generation;
            }
            None => {
                self.queued.insert(
                    key.clone(),
                    Queued {
                        lane,
                        generation,
                        since,
                    },
                );
            }
        }
        match lane {
            Lane::Fresh => self.fresh.push_back((key, generation)),
            Lane::Background => self.background.push_back((key, generation)),
        }
        true
    }

    /// Schedules `key` for `at` unless it is queued or due sooner already.
    /// Returns whether a waiting worker must look again (an item to take,
    /// or a timer earlier than any it sleeps for).
    fn add_at(&mut self, key: K, at: Instant, now: Instant) -> bool {
        if at <= now {
            return self.enqueue(key, Lane::Background, now);
        }
        if self.queued.contains_key(&key) {
            return false;
        }
        if let Some(old) = self.timer_of.get(&key) {
            if old.0 <= at {
                return false;
            }
            self.timers.remove(old);
        }
        let earliest = self.next_timer().is_none_or(|first| at < first);
        let slot = (at, self.generation());
        self.timers.insert(slot, key.clone());
        self.timer_of.insert(key, slot);
        earliest
    }

    /// Moves every timer due by `now` to the background lane.
    fn promote_due(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            let at = entry.key().0;
            if at > now {
                break;
            }
            let key = entry.remove();
            self.timer_of.remove(&key);
            self.enqueue(key, Lane::Background, at);
        }
    }

    /// The first valid entry of `lane`, stale ones dropped.
    fn head(&mut self, lane: Lane) -> Option<(&K, Instant)> {
        let deque = match lane {
            Lane::Fresh => &mut self.fresh,
            Lane::Background => &mut self.background,
        };
        while let Some((key, generation)) = deque.front() {
            match self.queued.get(key) {
                Some(q) if q.generation == *generation && q.lane == lane => break,
                _ => {
                    deque.pop_front();
                }
            }
        }
        let (key, _) = deque.front()?;
        Some((key, self.queued[key].since))
    }

    /// Takes the next key to work on, and how long it waited.
    fn pop(&mut self, now: Instant) -> Option<(K, Duration)> {
        self.promote_due(now);
        let overdue = self
            .head(Lane::Background)
            .is_some_and(|(_, since)| now.saturating_duration_since(since) > AGING);
        let lane = if overdue || self.head(Lane::Fresh).is_none() {
            Lane::Background
        } else {
            Lane::Fresh
        };
        self.head(lane)?;
        let (key, _) = match lane {
            Lane::Fresh => self.fresh.pop_front(),
            Lane::Background => self.background.pop_front(),
        }?;
        let q = self.queued.remove(&key).expect("a valid head is queued");
        self.processing.insert(key.clone());
        Some((key, now.saturating_duration_since(q.since)))
    }

    /// `key` is done; `next` is what its reconcile asked for. Returns
    /// whether a worker has something new to take.
    fn done(&mut self, key: K, next: Action, now: Instant) -> bool {
        self.processing.remove(&key);
        if let Some(lane) = self.dirty.remove(&key) {
            return self.add(key, lane, now);
        }
        match next.requeue_after {
            Some(delay) => self.add_at(key, now + delay, now),
            None => false,
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|((at, _), _)| *at)
    }

    fn depth(&self) -> usize {
        self.queued.len()
    }
}

/// The queue shared by the workers and the feeds.
pub struct WorkQueue<K> {
    queue: Mutex<Queue<K>>,
    ready: Notify,
}

impl<K: Hash + Eq + Clone> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            queue: Mutex::new(Queue::default()),
            ready: Notify::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> WorkQueue<K> {
    pub fn add(&self, key: K, lane: Lane) {
        if self.queue.lock().add(key, lane, Instant::now()) {
            self.ready.notify_one();
        }
    }

    pub fn done(&self, key: K, next: Action) {
        if self.queue.lock().done(key, next, Instant::now()) {
            self.ready.notify_one();
        }
    }

    pub fn depth(&self) -> usize {
        self.queue.lock().depth()
    }

    /// `key` failed once more; returns its failures in a row (1 for the
    /// first).
    pub fn failed(&self, key: &K) -> u32 {
        let mut q = self.queue.lock();
        let n = q.failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// `key` succeeded: its next failure is a first one again.
    pub fn succeeded(&self, key: &K) {
        self.queue.lock().failures.remove(key);
    }

    /// Waits for the next key; returns it and how long it waited.
    pub async fn next(&self) -> (K, Duration) {
        loop {
            // Registered before looking, so an add in between wakes us.
            let notified = self.ready.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let timer = {
                let mut q = self.queue.lock();
                if let Some(next) = q.pop(Instant::now()) {
                    // Others may be waiting and there may be more.
                    if q.depth() > 0 {
                        self.ready.notify_one();
                    }
                    return next;
                }
                q.next_timer()
            };
            match timer {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn t0() -> Instant {
        Instant::now()
    }

    fn drain(q: &mut Queue<&'static str>, now: Instant) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some((k, _)) = q.pop(now) {
            out.push(k);
            q.done(k, Action::await_change(), now);
        }
        out
    }

    #[test]
    fn a_burst_is_served_in_arrival_order_once_per_key() {
        let now = t0();
        let mut q = Queue::default();
        for k in ["a", "b", "c", "b", "a", "d"] {
            q.add(k, Lane::Fresh, now);
        }
        assert_eq!(q.depth(), 4);
        assert_eq!(drain(&mut q, now), ["a", "b", "c", "d"]);
    }

    #[test]
    fn fresh_work_goes_before_due_retries_until_they_age() {
        let now = t0();
        let mut q = Queue::default();
        q.add("retry-1", Lane::Background, now);
        q.add("retry-2", Lane::Background, now);
        q.add("new-1", Lane::Fresh, now);
        q.add("new-2", Lane::Fresh, now);
        assert_eq!(drain(&mut q, now), ["new-1", "new-2", "retry-1", "retry-2"]);

        q.add("retry", Lane::Background, now);
        q.add("new-1", Lane::Fresh, now);
        q.add("new-2", Lane::Fresh, now);
        let later = now + AGING + Duration::from_millis(1);
        assert_eq!(
            drain(&mut q, later),
            ["retry", "new-1", "new-2"],
            "a retry due for longer than AGING goes first"
        );
    }

    #[test]
    fn a_changed_retry_becomes_fresh_work_at_the_back() {
        let now = t0();
        let mut q = Queue::default();
        q.add("x", Lane::Background, now);
        q.add("a", Lane::Fresh, now);
        q.add("x", Lane::Fresh, now);
        q.add("b", Lane::Fresh, now);
        assert_eq!(drain(&mut q, now), ["a", "x", "b"]);
        assert!(
            q.fresh.is_empty() && q.background.is_empty(),
            "no stale entry left"
        );
    }

    #[test]
    fn one_worker_per_key_and_a_change_while_working_goes_round_again() {
        let now = t0();
        let mut q = Queue::default();
        q.add("a", Lane::Fresh, now);
        let (k, _) = q.pop(now).unwrap();
        q.add("a", Lane::Background, now);
        q.add("a", Lane::Fresh, now);
        assert!(q.pop(now).is_none(), "never two workers on one key");
        assert!(q.done(k, Action::requeue(Duration::from_secs(60)), now));
        assert_eq!(q.head(Lane::Fresh).map(|(k, _)| *k), Some("a"));
        assert!(q.timers.is_empty(), "running again now replaces the timer");
    }

    #[test]
    fn requeues_wait_their_delay_and_the_earliest_wins() {
        let now = t0();
        let mut q = Queue::default();
        q.add("a", Lane::Fresh, now);
        let (k, _) = q.pop(now).unwrap();
        q.done(k, Action::requeue(Duration::from_secs(10)), now);
        q.add_at("a", now + Duration::from_secs(30), now);
        q.add_at("a", now + Duration::from_secs(5), now);
        assert_eq!(q.next_timer(), Some(now + Duration::from_secs(5)));
        assert!(q.pop(now + Duration::from_secs(4)).is_none());
        let (k, waited) = q.pop(now + Duration::from_secs(7)).unwrap();
        assert_eq!(
            (k, waited),
            ("a", Duration::from_secs(2)),
            "waited since due"
        );
        q.done(k, Action::await_change(), now);
        assert_eq!(q.depth(), 0);
        assert!(q.timers.is_empty() && q.timer_of.is_empty());
    }

    #[test]
    fn a_watch_change_replaces_a_pending_retry() {
        let now = t0();
        let mut q = Queue::default();
        q.add_at("a", now + Duration::from_secs(60), now);
        q.add("a", Lane::Fresh, now);
        assert_eq!(drain(&mut q, now + Duration::from_secs(120)), ["a"]);
    }

    #[test]
    fn failures_count_per_key_until_a_success() {
        let work = WorkQueue::<&str>::default();
        assert_eq!(
            [work.failed(&"a"), work.failed(&"a"), work.failed(&"b")],
            [1, 2, 1]
        );
        work.succeeded(&"a");
        assert_eq!(work.failed(&"a"), 1);
        work.succeeded(&"a");
        work.succeeded(&"b");
        assert!(
            work.queue.lock().failures.is_empty(),
            "nothing kept for keys that succeeded"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_worker_wakes_for_a_timer_set_while_it_waits() {
        let work = Arc::new(WorkQueue::<u32>::default());
        // One key in progress, its retry scheduled only once an idle
        // worker is already waiting (with no timer at all).
        work.add(1, Lane::Fresh);
        let (one, _) = work.next().await;
        let w = work.clone();
        let idle = tokio::spawn(async move {
            let (k, _) = w.next().await;
            (k, Instant::now())
        });
        tokio::task::yield_now().await;
        let start = Instant::now();
        work.done(one, Action::requeue(Duration::from_secs(2)));
        let (k, at) = tokio::time::timeout(Duration::from_secs(60), idle)
            .await
            .expect("the idle worker took the retry")
            .unwrap();
        assert_eq!((k, at - start), (1, Duration::from_secs(2)));
    }

    #[tokio::test(start_paused = true)]
    async fn workers_wake_for_adds_and_timers() {
        let work = Arc::new(WorkQueue::<u32>::default());
        let w = work.clone();
        let taken = tokio::spawn(async move {
            let (a, _) = w.next().await;
            w.done(a, Action::requeue(Duration::from_secs(3)));
            let (b, _) = w.next().await;
            (a, b, Instant::now())
        });
        tokio::task::yield_now().await;
        let start = Instant::now();
        work.add(7, Lane::Fresh);
        let (a, b, at) = taken.await.unwrap();
        assert_eq!((a, b), (7, 7));
        assert_eq!(at - start, Duration::from_secs(3));
    }
}
