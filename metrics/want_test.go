package metrics_test

// The expositions of newWorld's components, checked by hand against the
// state each fixture builds (fixture_test.go).
const (
	wantBoard = `
# HELP coldstart_gate_state Whether each gate on the board is in the state the state label names (locked, unlocked or failed): 1 for its state, 0 for the others.
# TYPE coldstart_gate_state gauge
coldstart_gate_state{board="c0",gate="api-caller",state="failed"} 0
coldstart_gate_state{board="c0",gate="api-caller",state="locked"} 1
coldstart_gate_state{board="c0",gate="api-caller",state="unlocked"} 0
coldstart_gate_state{board="c0",gate="controller-port",state="failed"} 0
coldstart_gate_state{board="c0",gate="controller-port",state="locked"} 0
coldstart_gate_state{board="c0",gate="controller-port",state="unlocked"} 1
coldstart_gate_state{board="c0",gate="mongo",state="failed"} 1
coldstart_gate_state{board="c0",gate="mongo",state="locked"} 0
coldstart_gate_state{board="c0",gate="mongo",state="unlocked"} 0
# HELP coldstart_gate_wait_seconds How long each gate has been locked, or how long it took to open or fail, since it was put on the board.
# TYPE coldstart_gate_wait_seconds gauge
coldstart_gate_wait_seconds{board="c0",gate="api-caller"} 5
coldstart_gate_wait_seconds{board="c0",gate="controller-port"} 2
coldstart_gate_wait_seconds{board="c0",gate="mongo"} 3
`
	wantListener = `
# HELP coldstart_listener_accepted_connections_total Connections accepted from the kernel on the port, including one held while the rate limit delays its hand-off.
# TYPE coldstart_listener_accepted_connections_total counter
coldstart_listener_accepted_connections_total{listener="c0",port="api"} 1
coldstart_listener_accepted_connections_total{listener="c0",port="controller"} 3
# HELP coldstart_listener_bound 1 while the port is bound to its address, else 0.
# TYPE coldstart_listener_bound gauge
coldstart_listener_bound{listener="c0",port="api"} 1
coldstart_listener_bound{listener="c0",port="controller"} 1
# HELP coldstart_listener_closed 1 once the listener has been closed, else 0.
# TYPE coldstart_listener_closed gauge
coldstart_listener_closed{listener="c0"} 0
# HELP coldstart_listener_connections Connections handed to Accept, or ready to be, and not yet closed.
# TYPE coldstart_listener_connections gauge
coldstart_listener_connections{listener="c0",port="api"} 1
coldstart_listener_connections{listener="c0",port="controller"} 2
# HELP coldstart_listener_failed 1 if a permanent accept failure killed the listener, else 0.
# TYPE coldstart_listener_failed gauge
coldstart_listener_failed{listener="c0"} 0
# HELP coldstart_listener_open 1 while the port's accept loop runs, else 0.
# TYPE coldstart_listener_open gauge
coldstart_listener_open{listener="c0",port="api"} 1
coldstart_listener_open{listener="c0",port="controller"} 1
# HELP coldstart_listener_open_failed 1 if the API port failed to open (Cause), else 0; always 0 for the controller port.
# TYPE coldstart_listener_open_failed gauge
coldstart_listener_open_failed{listener="c0",port="api"} 0
coldstart_listener_open_failed{listener="c0",port="controller"} 0
# HELP coldstart_listener_rate_limited_connections_total Accepted connections whose hand-off the API port's rate limit delayed.
# TYPE coldstart_listener_rate_limited_connections_total counter
coldstart_listener_rate_limited_connections_total{listener="c0",port="api"} 0
coldstart_listener_rate_limited_connections_total{listener="c0",port="controller"} 0
# HELP coldstart_listener_refused_connections_total Accepted connections closed unserved because the port closed under them (CloseAPI or Close).
# TYPE coldstart_listener_refused_connections_total counter
coldstart_listener_refused_connections_total{listener="c0",port="api"} 0
coldstart_listener_refused_connections_total{listener="c0",port="controller"} 0
# HELP coldstart_listener_temporary_errors_total Accept errors on the port that were retried.
# TYPE coldstart_listener_temporary_errors_total counter
coldstart_listener_temporary_errors_total{listener="c0",port="api"} 0
coldstart_listener_temporary_errors_total{listener="c0",port="controller"} 0
# HELP coldstart_listener_throttled_seconds_total Time the port's accept loop waited for the rate limit or the connection cap.
# TYPE coldstart_listener_throttled_seconds_total counter
coldstart_listener_throttled_seconds_total{listener="c0",port="api"} 0
coldstart_listener_throttled_seconds_total{listener="c0",port="controller"} 0
`
	wantDialerLocal = `
# HELP coldstart_dialer_dials_total Dial and Connect calls that connected, by route: local (this machine's controller) or peer.
# TYPE coldstart_dialer_dials_total counter
coldstart_dialer_dials_total{dialer="c0",route="local"} 1
coldstart_dialer_dials_total{dialer="c0",route="peer"} 0
# HELP coldstart_dialer_failures_total Calls that returned a DialError: their context ended before any address answered.
# TYPE coldstart_dialer_failures_total counter
coldstart_dialer_failures_total{dialer="c0"} 0
# HELP coldstart_dialer_fallbacks_total Calls that dialled a peer although this machine has a controller: it was not ready within LocalReadyGrace, or did not answer.
# TYPE coldstart_dialer_fallbacks_total counter
coldstart_dialer_fallbacks_total{dialer="c0"} 0
# HELP coldstart_dialer_local_ready 1 once this machine's controller is ready (Config.LocalReady closed), else 0.
# TYPE coldstart_dialer_local_ready gauge
coldstart_dialer_local_ready{dialer="c0"} 1
`
	wantDialerAgent = `
# HELP coldstart_dialer_dials_total Dial and Connect calls that connected, by route: local (this machine's controller) or peer.
# TYPE coldstart_dialer_dials_total counter
coldstart_dialer_dials_total{dialer="agent",route="local"} 0
coldstart_dialer_dials_total{dialer="agent",route="peer"} 1
# HELP coldstart_dialer_failures_total Calls that returned a DialError: their context ended before any address answered.
# TYPE coldstart_dialer_failures_total counter
coldstart_dialer_failures_total{dialer="agent"} 1
# HELP coldstart_dialer_fallbacks_total Calls that dialled a peer although this machine has a controller: it was not ready within LocalReadyGrace, or did not answer.
# TYPE coldstart_dialer_fallbacks_total counter
coldstart_dialer_fallbacks_total{dialer="agent"} 1
# HELP coldstart_dialer_local_ready 1 once this machine's controller is ready (Config.LocalReady closed), else 0.
# TYPE coldstart_dialer_local_ready gauge
coldstart_dialer_local_ready{dialer="agent"} 1
`
	wantLeader = `
# HELP coldstart_lease_call_in_flight_seconds How long the store call now in flight has run; 0 when none is.
# TYPE coldstart_lease_call_in_flight_seconds gauge
coldstart_lease_call_in_flight_seconds{lease="singular-controller"} 0
# HELP coldstart_lease_closed 1 once the tracker has been closed, else 0.
# TYPE coldstart_lease_closed gauge
coldstart_lease_closed{lease="singular-controller"} 0
# HELP coldstart_lease_denials_total Claims the store denied because another holder had the lease.
# TYPE coldstart_lease_denials_total counter
coldstart_lease_denials_total{lease="singular-controller"} 0
# HELP coldstart_lease_handover_gap_seconds Leaderless gaps of the hand-overs to this tracker: from the end of another holder's term as it learnt it (the release or expiry its store's watch reported, else its last refused claim) to its own Held.
# TYPE coldstart_lease_handover_gap_seconds summary
coldstart_lease_handover_gap_seconds_sum{lease="singular-controller"} 0
coldstart_lease_handover_gap_seconds_count{lease="singular-controller"} 0
# HELP coldstart_lease_last_call_seconds How long the last finished store call took.
# TYPE coldstart_lease_last_call_seconds gauge
coldstart_lease_last_call_seconds{lease="singular-controller"} 0
# HELP coldstart_lease_late_renewals_total Renewals whose timer fired more than Margin/4 late, by the first cause the process saw (suspend, clock-step, throttled, gc-pause, scheduler, or unexplained); a late renewal demotes nothing.
# TYPE coldstart_lease_late_renewals_total counter
coldstart_lease_late_renewals_total{cause="clock-step",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="gc-pause",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="scheduler",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="suspend",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="throttled",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="unexplained",lease="singular-controller"} 0
# HELP coldstart_lease_losses_total Terms this tracker held that the store said are over (definitive losses).
# TYPE coldstart_lease_losses_total counter
coldstart_lease_losses_total{lease="singular-controller"} 0
# HELP coldstart_lease_state Whether the tracker's lease is in the state the state label names (unknown, held or not-held): 1 for its state, 0 for the others.
# TYPE coldstart_lease_state gauge
coldstart_lease_state{lease="singular-controller",state="held"} 1
coldstart_lease_state{lease="singular-controller",state="not-held"} 0
coldstart_lease_state{lease="singular-controller",state="unknown"} 0
# HELP coldstart_lease_token The fencing token of the term last confirmed by the store.
# TYPE coldstart_lease_token gauge
coldstart_lease_token{lease="singular-controller"} 1
# HELP coldstart_lease_transitions_total Changes of the tracker's state.
# TYPE coldstart_lease_transitions_total counter
coldstart_lease_transitions_total{lease="singular-controller"} 1
# HELP coldstart_lease_unknown_seconds_total Time the tracker spent in state unknown, the current stretch included.
# TYPE coldstart_lease_unknown_seconds_total counter
coldstart_lease_unknown_seconds_total{lease="singular-controller"} 0
# HELP coldstart_lease_until_timestamp_seconds While the lease is held, when the promise ends (on the tracker's clock, Unix time on the wall clock); 0 while it is not held.
# TYPE coldstart_lease_until_timestamp_seconds gauge
coldstart_lease_until_timestamp_seconds{lease="singular-controller"} 1.7672256285e+09
`
	wantFollower = `
# HELP coldstart_lease_call_in_flight_seconds How long the store call now in flight has run; 0 when none is.
# TYPE coldstart_lease_call_in_flight_seconds gauge
coldstart_lease_call_in_flight_seconds{lease="singular-controller"} 0
# HELP coldstart_lease_closed 1 once the tracker has been closed, else 0.
# TYPE coldstart_lease_closed gauge
coldstart_lease_closed{lease="singular-controller"} 0
# HELP coldstart_lease_denials_total Claims the store denied because another holder had the lease.
# TYPE coldstart_lease_denials_total counter
coldstart_lease_denials_total{lease="singular-controller"} 1
# HELP coldstart_lease_handover_gap_seconds Leaderless gaps of the hand-overs to this tracker: from the end of another holder's term as it learnt it (the release or expiry its store's watch reported, else its last refused claim) to its own Held.
# TYPE coldstart_lease_handover_gap_seconds summary
coldstart_lease_handover_gap_seconds_sum{lease="singular-controller"} 0
coldstart_lease_handover_gap_seconds_count{lease="singular-controller"} 0
# HELP coldstart_lease_last_call_seconds How long the last finished store call took.
# TYPE coldstart_lease_last_call_seconds gauge
coldstart_lease_last_call_seconds{lease="singular-controller"} 0
# HELP coldstart_lease_late_renewals_total Renewals whose timer fired more than Margin/4 late, by the first cause the process saw (suspend, clock-step, throttled, gc-pause, scheduler, or unexplained); a late renewal demotes nothing.
# TYPE coldstart_lease_late_renewals_total counter
coldstart_lease_late_renewals_total{cause="clock-step",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="gc-pause",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="scheduler",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="suspend",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="throttled",lease="singular-controller"} 0
coldstart_lease_late_renewals_total{cause="unexplained",lease="singular-controller"} 0
# HELP coldstart_lease_losses_total Terms this tracker held that the store said are over (definitive losses).
# TYPE coldstart_lease_losses_total counter
coldstart_lease_losses_total{lease="singular-controller"} 0
# HELP coldstart_lease_state Whether the tracker's lease is in the state the state label names (unknown, held or not-held): 1 for its state, 0 for the others.
# TYPE coldstart_lease_state gauge
coldstart_lease_state{lease="singular-controller",state="held"} 0
coldstart_lease_state{lease="singular-controller",state="not-held"} 1
coldstart_lease_state{lease="singular-controller",state="unknown"} 0
# HELP coldstart_lease_token The fencing token of the term last confirmed by the store.
# TYPE coldstart_lease_token gauge
coldstart_lease_token{lease="singular-controller"} 0
# HELP coldstart_lease_transitions_total Changes of the tracker's state.
# TYPE coldstart_lease_transitions_total counter
coldstart_lease_transitions_total{lease="singular-controller"} 1
# HELP coldstart_lease_unknown_seconds_total Time the tracker spent in state unknown, the current stretch included.
# TYPE coldstart_lease_unknown_seconds_total counter
coldstart_lease_unknown_seconds_total{lease="singular-controller"} 0
# HELP coldstart_lease_until_timestamp_seconds While the lease is held, when the promise ends (on the tracker's clock, Unix time on the wall clock); 0 while it is not held.
# TYPE coldstart_lease_until_timestamp_seconds gauge
coldstart_lease_until_timestamp_seconds{lease="singular-controller"} 0
`
	wantLeaderStatus = `
# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.
# TYPE leader_election_master_status gauge
leader_election_master_status{name="singular-controller"} 1
`
	wantUpgrade = `
# HELP coldstart_upgrade_attempts_total Upgrade attempts begun: 1 for the gate's first, one more each time Enter leaves complete or failed.
# TYPE coldstart_upgrade_attempts_total counter
coldstart_upgrade_attempts_total{upgrade="c0"} 2
# HELP coldstart_upgrade_calls_total Calls the gate decided while it refused calls (Middleware, grpcupgrade's interceptors, Admit), by phase and outcome: admitted (allowlisted) or refused (not executed). Calls served while complete are not counted.
# TYPE coldstart_upgrade_calls_total counter
coldstart_upgrade_calls_total{outcome="admitted",phase="checking",upgrade="c0"} 1
coldstart_upgrade_calls_total{outcome="refused",phase="checking",upgrade="c0"} 1
coldstart_upgrade_calls_total{outcome="admitted",phase="running-steps",upgrade="c0"} 1
coldstart_upgrade_calls_total{outcome="refused",phase="running-steps",upgrade="c0"} 2
coldstart_upgrade_calls_total{outcome="admitted",phase="failed",upgrade="c0"} 0
coldstart_upgrade_calls_total{outcome="refused",phase="failed",upgrade="c0"} 1
coldstart_upgrade_calls_total{outcome="admitted",phase="draining",upgrade="c0"} 0
coldstart_upgrade_calls_total{outcome="refused",phase="draining",upgrade="c0"} 0
# HELP coldstart_upgrade_last_failed 1 if an attempt has failed and left its cause (kept across attempts, so it says why the previous one failed), else 0.
# TYPE coldstart_upgrade_last_failed gauge
coldstart_upgrade_last_failed{upgrade="c0"} 1
# HELP coldstart_upgrade_phase Whether the upgrade gate is in the phase the phase label names (checking, running-steps, complete, failed or draining): 1 for its phase, 0 for the others.
# TYPE coldstart_upgrade_phase gauge
coldstart_upgrade_phase{phase="checking",upgrade="c0"} 1
coldstart_upgrade_phase{phase="complete",upgrade="c0"} 0
coldstart_upgrade_phase{phase="draining",upgrade="c0"} 0
coldstart_upgrade_phase{phase="failed",upgrade="c0"} 0
coldstart_upgrade_phase{phase="running-steps",upgrade="c0"} 0
`
	// The trackers' MemStore: c0's claim and renewal, c1's claim refused.
	wantStore = `
# HELP coldstart_lease_store_calls_in_flight Store calls begun and not yet returned, including calls the store holds back while it bounds its calls in flight.
# TYPE coldstart_lease_store_calls_in_flight gauge
coldstart_lease_store_calls_in_flight{store="mem"} 0
# HELP coldstart_lease_store_calls_total Store calls finished, by operation (claim, extend, revoke) and outcome: ok, definitive (ErrHeld from claim, ErrNotHeld from extend and revoke), not-sent (ErrNotSent) or ambiguous (any other error: the store may have applied the call).
# TYPE coldstart_lease_store_calls_total counter
coldstart_lease_store_calls_total{operation="claim",outcome="ok",store="mem"} 1
coldstart_lease_store_calls_total{operation="claim",outcome="definitive",store="mem"} 1
coldstart_lease_store_calls_total{operation="claim",outcome="not-sent",store="mem"} 0
coldstart_lease_store_calls_total{operation="claim",outcome="ambiguous",store="mem"} 0
coldstart_lease_store_calls_total{operation="extend",outcome="ok",store="mem"} 1
coldstart_lease_store_calls_total{operation="extend",outcome="definitive",store="mem"} 0
coldstart_lease_store_calls_total{operation="extend",outcome="not-sent",store="mem"} 0
coldstart_lease_store_calls_total{operation="extend",outcome="ambiguous",store="mem"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="ok",store="mem"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="definitive",store="mem"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="not-sent",store="mem"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="ambiguous",store="mem"} 0
`
)
