//! The demo's pure parts: its events and their delivery order.

use super::*;

#[test]
fn delivery_order_is_every_event_k_times_and_reproducible() {
    let a = delivery_order(10, 3, 42);
    assert_eq!(a, delivery_order(10, 3, 42));
    assert_ne!(a, delivery_order(10, 3, 43));
    let mut sorted = a.clone();
    sorted.sort();
    let want: Vec<usize> = (0..10).flat_map(|i| [i, i, i]).collect();
    assert_eq!(sorted, want);
}

#[test]
fn events_are_the_same_for_the_same_seed() {
    assert_eq!(event(42, 7).amount_cents, event(42, 7).amount_cents);
    assert_eq!(event(42, 7).id, "evt_000007");
}
