//! The one way tests wait: poll a probe with a deadline, and on timeout
//! fail saying what was awaited and what was last seen.

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
}
