/**
 * Issue 13 item 8: tests say what they skipped. A test that needs a server which does not answer is reported by
 * jest as skipped (not as passed after returning early); REQUIRE_SERVERS=1 turns that into a failure. No test of
 * test/e2e or test/integration returns early on a missing server any more.
 */
import { spawnSync } from "child_process";
import { readdirSync, readFileSync } from "fs";
import net from "net";
import path from "path";

jest.setTimeout(120_000);

const ROOT = path.resolve(__dirname, "../..");

async function closedPort(): Promise<number> {
	return new Promise((resolve) => {
		const s = net.createServer().listen(0, "127.0.0.1", () => {
			const port = (s.address() as net.AddressInfo).port;
			s.close(() => resolve(port));
		});
	});
}

function runFixture(port: number, env: Record<string, string> = {}) {
	const r = spawnSync(
		process.execPath,
		[
			path.join(ROOT, "node_modules", "jest", "bin", "jest.js"),
			"--config",
			path.join(ROOT, "jest.config.js"),
			"--roots",
			"<rootDir>/test/fixtures",
			"--testMatch",
			"**/needs-server.fixture.ts",
			"--json",
		],
		{ cwd: ROOT, encoding: "utf8", env: { ...process.env, FIXTURE_PORT: String(port), REQUIRE_SERVERS: "", ...env } },
	);
	return JSON.parse(r.stdout) as { numPassedTests: number; numPendingTests: number; numFailedTests: number; numFailedTestSuites: number; success: boolean };
}

test("a server that does not answer: its tests are reported as skipped, the others pass", async () => {
	const r = runFixture(await closedPort());
	expect({ passed: r.numPassedTests, skipped: r.numPendingTests, failed: r.numFailedTests }).toEqual({ passed: 1, skipped: 2, failed: 0 });
});

test("a server that answers: every test runs", async () => {
	const server = net.createServer((s) => s.end());
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	try {
		const r = runFixture((server.address() as net.AddressInfo).port);
		expect({ passed: r.numPassedTests, skipped: r.numPendingTests, failed: r.numFailedTests }).toEqual({ passed: 3, skipped: 0, failed: 0 });
	} finally {
		server.close();
	}
});

test("REQUIRE_SERVERS=1: a server that does not answer fails the file", async () => {
	const r = runFixture(await closedPort(), { REQUIRE_SERVERS: "1" });
	expect(r.success).toBe(false);
	expect(r.numFailedTestSuites).toBe(1);
});

test("no test in test/e2e or test/integration returns early on a missing server", () => {
	const offenders: string[] = [];
	for (const dir of ["test/e2e", "test/integration"])
		for (const f of readdirSync(path.join(ROOT, dir)).filter((x) => x.endsWith(".test.ts"))) {
			const text = readFileSync(path.join(ROOT, dir, f), "utf8");
			if (/requireServer\(/.test(text)) offenders.push(`${dir}/${f}: requireServer`);
			// A test body whose first statement returns when a server is down would be reported as passed.
			if (/(?:test|it)\([^\n]*=>\s*\{\n\s*if \(!\w+\) return;/.test(text)) offenders.push(`${dir}/${f}: early return in a test`);
		}
	expect(offenders).toEqual([]);
});
