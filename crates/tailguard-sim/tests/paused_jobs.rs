//! A class whose jobs run and pause in turn: its worst 0.5 s rate counts only
//! windows inside the spans its jobs run in, as `tailguard bench` counts it,
//! so a pause is not reported as a collapse.

use tailguard_sim::engine::run;
use tailguard_sim::policy::PolicyName;
use tailguard_sim::scenario::Scenario;

/// Readers in one class on an nvme device with `device` lines added to its
/// table, one job per span (seconds).
fn readers(spans: &[(f64, f64)], device: &str) -> Scenario {
    let mut text = format!(
        "duration_s = 3.0\n[[device]]\nname = \"dev\"\nmodel = \"nvme\"\n{device}\n\
         [[class]]\nname = \"reads\"\nshares = 100\n"
    );
    for (index, (start_s, stop_s)) in spans.iter().enumerate() {
        text += &format!(
            "[[job]]\nname = \"readers{index}\"\nclass = \"reads\"\ndevice = \"dev\"\n\
             pattern = \"randread\"\nblock_size = \"4k\"\nqueue_depth = 1\nnumjobs = 4\n\
             size = \"1g\"\nstart_s = {start_s}\nstop_s = {stop_s}\n"
        );
    }
    Scenario::from_toml(&text).unwrap()
}

fn worst_and_mean_while_running(spans: &[(f64, f64)]) -> (f64, f64) {
    worst_and_mean_on(spans, "")
}

fn worst_and_mean_on(spans: &[(f64, f64)], device: &str) -> (f64, f64) {
    let report = run(&readers(spans, device), PolicyName::Fifo, 1).unwrap();
    let row = report.class("reads", "dev").unwrap();
    let running_s: f64 = spans.iter().map(|(start, stop)| stop - start).sum();
    let worst = row
        .worst_500ms_iops
        .expect("whole windows inside the spans");
    (worst, row.ops as f64 / running_s)
}

#[test]
fn pauses_between_a_class_s_jobs_are_not_counted_as_windows() {
    let (worst, mean) = worst_and_mean_while_running(&[(0.0, 1.0), (2.0, 3.0)]);
    println!("paused: worst {worst:.0}/s, mean while running {mean:.0}/s");
    assert!(
        worst > 0.8 * mean,
        "a pause counted as a window: worst {worst}/s against {mean}/s while running"
    );
}

#[test]
fn jobs_back_to_back_count_as_one_span() {
    let (joined, _) = worst_and_mean_while_running(&[(0.0, 1.5), (1.5, 3.0)]);
    let (whole, _) = worst_and_mean_while_running(&[(0.0, 3.0)]);
    println!("back to back {joined:.0}/s, one job {whole:.0}/s");
    assert!(joined > 0.8 * whole);
}

#[test]
fn jobs_back_to_back_between_windows_count_as_one_span() {
    // The jobs meet at 1.2 s, inside a 0.5 s window, and the device runs
    // at a tenth of its speed for the run's last 0.3 s. As one span, the
    // windows run from 0 and the last, 2.5 s to 3 s, holds the slow part;
    // as two spans they would run from 1.2 s and end at 2.7 s, missing it.
    let slow_end = "slowdown = [{ start_s = 2.7, stop_s = 3.0, factor = 0.1 }]";
    let (joined, _) = worst_and_mean_on(&[(0.0, 1.2), (1.2, 3.0)], slow_end);
    let (whole, mean) = worst_and_mean_on(&[(0.0, 3.0)], slow_end);
    println!("back to back at 1.2 s {joined:.0}/s, one job {whole:.0}/s, mean {mean:.0}/s");
    assert!(whole < 0.7 * mean, "the slow end is in the last window");
    assert!(
        (joined - whole).abs() <= 0.1 * whole,
        "back to back {joined}/s, one job {whole}/s"
    );
}
