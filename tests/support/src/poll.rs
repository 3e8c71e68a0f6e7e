//! The one way tests wait: poll a probe with a deadline, and on timeout
//! fail saying what was awaited and what was last seen ([`eventually`]), or
//! hand the last value back for the caller to count ([`poll_until`]).

use std::future::Future;
use std::time::Duration;

/// How long a test waits for the system to converge.
pub const DEADLINE: Duration = Duration::from_secs(60);
/// How often a probe is retried.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// Polls `probe` every [`INTERVAL`] until it returns `Ok`, failing the test
/// after [`DEADLINE`] with `what` and the last state `probe` described.
pub async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    eventually_within(DEADLINE, INTERVAL, what, probe).await
}

/// [`eventually`] with its own deadline and interval.
pub async fn eventually_within<T, F, Fut>(
    within: Duration,
    every: Duration,
    what: &str,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) => assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}; last seen: {last}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until `condition` holds; for probes with nothing to report.
pub async fn wait_until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually(what, || {
        let check = condition();
        async move {
            if check.await {
                Ok(())
            } else {
                Err("not yet".to_owned())
            }
        }
    })
    .await
}

/// Polls `probe` every `every` until `done` holds for its value or `within`
/// has passed, and returns the last value either way: for callers that
/// count or report what is left rather than fail at once.
pub async fn poll_until<T, F, Fut>(
    within: Duration,
    every: Duration,
    mut probe: F,
    done: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = probe().await;
        if done(&value) || tokio::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_success() {
        let mut n = 0;
        let v = eventually("n to reach 3", || {
            n += 1;
            let now = n;
            async move {
                if now >= 3 {
                    Ok(now)
                } else {
                    Err(format!("n={now}"))
                }
            }
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for never; last seen: still no")]
    async fn fails_with_what_and_the_last_state() {
        eventually_within(
            Duration::from_millis(30),
            Duration::from_millis(5),
            "never",
            || async { Err::<(), _>("still no".to_owned()) },
        )
        .await
    }

    #[tokio::test]
    async fn poll_until_returns_the_first_value_that_is_done() {
        let mut n = 0;
        let v = poll_until(
            Duration::from_secs(10),
            Duration::from_millis(1),
            || {
                n += 1;
                let now = n;
                async move { now }
            },
            |v| *v >= 3,
        )
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn poll_until_returns_the_last_value_at_the_deadline() {
        let mut n = 0;
        let v = poll_until(
            Duration::from_millis(30),
            Duration::from_millis(5),
            || {
                n += 1;
                let now = n;
                async move { now }
            },
            |_| false,
        )
        .await;
        assert!(v > 1, "polled more than once: {v}");
        assert_eq!(v, n, "the last value");
    }
}
