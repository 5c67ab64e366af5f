//! The store contract: every test body is written once and runs against every backend
//! (`memory::*` and `redis::*`), each Redis test on a `redis-server` of its own.
//!
//! The bodies follow the design note's test table (TestBasic, TestSlidingWindow, TestTiers,
//! TestRetryAfter, the edge cases, TestResultType), all driven by a `ManualClock`: no sleeps.
//! The bodies are in `tests/store_contract/`, a file per part of the table; Redis-only checks
//! of the keys themselves are in `tests/redis_keys.rs`.

mod common;

#[path = "store_contract/mod.rs"]
mod contract;

contract_tests!(
    a_cost_that_can_never_fit_is_named_even_behind_a_full_tier,
    a_request_can_spend_several_units,
    unit_and_costly_requests_mix,
    a_cost_above_the_limit_is_denied_and_says_why,
    a_route_carries_its_own_user_and_endpoint_limits,
    users_on_a_plan_get_its_user_limit,
    a_routes_own_user_limit_wins_over_a_plan,
    a_shadow_tier_never_denies_a_cost_above_its_limit,
    ietf_headers_name_every_policy_and_the_one_closest_to_its_limit,
    ietf_only_headers_leave_out_the_legacy_ones,
    shadow_mode_never_blocks_and_records_nothing_in_a_full_tier,
    a_shadow_tier_lets_through_and_the_others_still_count_and_block,
    allows_under_limit_then_denies,
    independent_user_counters,
    headers_present_when_allowed,
    headers_present_when_denied,
    denied_requests_are_not_counted,
    stale_entries_expire_after_window,
    gradual_recovery_one_slot_at_a_time,
    not_a_fixed_window,
    window_boundary_entry_still_counts,
    window_boundary_with_several_entries,
    microsecond_resolution,
    realistic_epoch_times_are_exact,
    user_blocks_first_when_tightest,
    remaining_is_smallest_over_tiers,
    endpoint_independence,
    global_blocks_across_users,
    tier_order_when_several_are_full,
    endpoint_denial_leaves_no_trace_in_user_tier,
    global_denial_leaves_no_trace_in_earlier_tiers,
    user_denial_leaves_no_trace_in_later_tiers,
    retry_after_decreases_as_time_advances,
    retry_after_zero_when_allowed,
    retry_after_comes_from_the_blocking_tiers_oldest_entry,
    retry_after_is_the_first_full_tiers_wait_not_a_later_ones,
    limit_of_one,
    limit_zero_switches_the_tier_off,
    all_limits_zero_always_allows,
    same_timestamp_burst,
    concurrent_same_timestamp_burst,
    clock_at_epoch_does_not_underflow,
    largest_window_at_epoch,
    large_window_3600s,
    large_limit_million,
    largest_limit,
    largest_limit_and_costs_stay_exact_over_a_long_life,
    mixed_tiers,
    anonymous_requests_skip_the_user_tier,
    client_ip_does_not_collide_with_user_ids,
    decision_serializes_when_allowed,
    decision_serializes_when_denied,
    decision_serializes_unlimited,
    weird_user_ids_never_collide,
    weird_endpoint_templates,
    reset_user_unblocks_only_that_user,
    reset_endpoint_unblocks_only_that_endpoint,
    full_capacity_returns_after_a_quiet_window,
);
