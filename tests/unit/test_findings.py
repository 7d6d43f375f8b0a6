from niclab.report.findings import dips

SMOOTH = [[2**i, min(600.0, 2.0 * 1.9**i), 50.0 + i] for i in range(1, 22)]


def test_a_smooth_curve_has_no_dip():
    assert dips(SMOOTH) == []


def test_a_plateau_with_noise_has_no_dip():
    wobbly = [[p[0], p[1] * (0.95 if i % 2 else 1.0), p[2]] for i, p in enumerate(SMOOTH)]
    assert dips(wobbly) == []


def test_a_dip_well_below_both_neighbours_is_found():
    curve = [list(p) for p in SMOOTH]
    curve[15][1] = 250.0  # as the E1000 at MTU 4000: a collapse at one size, recovered at the next
    assert dips(curve) == [(2**16, 250.0, 600.0)]


def test_a_rise_or_a_fall_is_not_a_dip():
    rising = [[1, 10.0, 1], [2, 20.0, 1], [4, 40.0, 1]]
    falling = [[1, 40.0, 1], [2, 20.0, 1], [4, 10.0, 1]]
    assert dips(rising) == [] and dips(falling) == []


def test_depth_decides():
    curve = [[1, 100.0, 1], [2, 88.0, 1], [4, 100.0, 1]]
    assert dips(curve) == []  # 12 % below: noise
    assert dips(curve, depth=0.10) == [(2, 88.0, 100.0)]
