/**
 * Liveness instrumentation (docs/contracts.md "Liveness": one request never delays /status by more than 100 ms): the gateway reports
 * its event-loop delay in /status and /metrics, and the status probe (test/helpers/status-probe.ts) that the invariant
 * suites use tells a stall of the platform from a machine that is merely busy.
 */
// jest-solo: times the event loop under a storm of requests (the /status bound; test/run.mjs)
import { spawn } from "child_process";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { describeProbe, expectStatusHeldUnder, loopCpuMs, startStatusProbe } from "../helpers/status-probe";

let p: TestPlatform;
beforeAll(async () => {
	p = await bootPlatform();
});
afterAll(() => p.cleanup());

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/**
 * Holds this process's event loop (the platform's: it runs in this process) for `ms` of CPU time: a fixed amount of
 * work, as a platform's computation is (on a loaded machine it takes longer on the clock).
 */
const spin = (ms: number) => {
	const end = loopCpuMs() + ms;
	while (loopCpuMs() < end);
};

test("/status carries the gateway's event-loop delay (p99 and max, ms) and stays backwards compatible; /metrics exports it", async () => {
	const s = await p.http("GET", "/status");
	expect(s.status).toBe(200);
	expect(s.body.status).toBe("ok");
	expect(s.body.info["event loop"]).toEqual({ status: "up", delay_ms: { p99: expect.any(Number), max: expect.any(Number) } });
	const { p99, max } = s.body.info["event loop"].delay_ms;
	expect(p99).toBeGreaterThanOrEqual(0);
	expect(max).toBeGreaterThanOrEqual(p99);
	// The other entries are as before.
	expect(s.body.info["document store"]).toEqual({ status: "up", kind: "postgres" });
	const m = (await p.http("GET", "/metrics")).text;
	expect(m).toMatch(/^# TYPE process_eventloop_delay_p99_seconds gauge$/m);
	expect(m).toMatch(/^process_eventloop_delay_max_seconds(\{[^}]*\})? [0-9.e+-]+$/m);
});

test("a synchronous stall of 300 ms of CPU: the platform reports it, and the probe counts it as held and fails the bound", async () => {
	const probe = startStatusProbe(p.url);
	await sleep(100);
	spin(300);
	await sleep(100);
	const r = await probe.stop();
	console.log(`stall: ${describeProbe(r)}`);
	expect(r.held).toBeGreaterThanOrEqual(250);
	await expect(expectStatusHeldUnder(r, 100)).rejects.toThrow(/heldUnderBound/);
	const after = await p.http("GET", "/status");
	expect(after.body.info["event loop"].delay_ms.max).toBeGreaterThanOrEqual(250);
});

test("a process waiting 400 ms for a core (stopped by the OS, no CPU) is not counted as held; an idle platform passes", async () => {
	// A child stops this process (SIGSTOP, as a scheduler that gives it no core) and resumes it 400 ms later. Forked
	// before the probe starts, so the fork's own CPU is outside the window.
	const child = spawn("sh", ["-c", `sleep 0.3; kill -STOP ${process.pid}; sleep 0.4; kill -CONT ${process.pid}`], { stdio: "ignore" });
	const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
	const probe = startStatusProbe(p.url);
	await exited;
	await sleep(100);
	const r = await expectStatusHeldUnder(probe, 100);
	console.log(`stopped process: ${describeProbe(r)}`);
	// The wait happened (a gap of the loop spans it) but burnt no CPU.
	expect(r.longestGap!.wall).toBeGreaterThanOrEqual(350);
	expect(r.longestGap!.cpu).toBeLessThan(100);
	expect(r.count).toBeGreaterThanOrEqual(5);
});
