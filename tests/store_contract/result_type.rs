//! The store contract: TestResultType: a decision serialized, allowed, denied and unlimited.

use super::*;

pub async fn decision_serializes_when_allowed(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    let d = limiter.check("alice", "/items").await;
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "allowed": true,
            "remaining": 2,
            "retry_after": 0,
            "blocked_by": null,
        })
    );
    assert_eq!(
        serde_json::to_string(&d).unwrap(),
        r#"{"allowed":true,"remaining":2,"retry_after":0,"blocked_by":null}"#
    );
    assert_still_on(&b, &limiter);
}

pub async fn decision_serializes_when_denied(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 1, 1, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    clock.advance(Duration::from_millis(100));
    for (user, endpoint, tier) in [
        ("alice", "/a", "user"),
        ("bob", "/a", "endpoint"),
        ("bob", "/b", "global"),
    ] {
        let d = limiter.check(user, endpoint).await;
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!({
                "allowed": false,
                "remaining": 0,
                // 59.900001 s, rounded up like the Retry-After header
                "retry_after": 60,
                "blocked_by": tier,
            })
        );
    }
    assert_still_on(&b, &limiter);
}

pub async fn decision_serializes_unlimited(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(0, 0, 0, MINUTE), &clock).await;
    let d = limiter.check("alice", "/a").await;
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["remaining"], serde_json::json!(u64::MAX));
    assert_eq!(json["allowed"], serde_json::json!(true));
    assert_eq!(json.as_object().unwrap().len(), 4);
    assert_still_on(&b, &limiter);
}
