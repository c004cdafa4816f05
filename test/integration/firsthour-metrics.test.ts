/**
 * Issue 13 item 10: the platform's own /metrics pass Prometheus' checker (`promtool check metrics`), and the HTTP
 * latency histogram has `_sum` and `_count` next to its `_bucket`s (with `+Inf`).
 */
import { spawnSync, execFileSync } from "child_process";
import { bootPlatform, type TestPlatform } from "../helpers/platform";

const promtool = (() => {
	try {
		return execFileSync("which", ["promtool"], { encoding: "utf8" }).trim();
	} catch {
		return "";
	}
})();
if (!promtool && process.env.REQUIRE_SERVERS === "1") throw new Error("REQUIRE_SERVERS=1 but promtool is missing (Debian package prometheus; .ci/run installs it)");

let p: TestPlatform;
let text: string;

beforeAll(async () => {
	p = await bootPlatform();
	const root = await p.rootToken();
	await p.http("POST", "/content/notes", { token: root, body: { title: "m" } });
	await p.http("GET", "/content/notes", { token: root });
	await p.http("GET", "/content/notes/nope", { token: root });
	text = (await p.http("GET", "/metrics")).text;
});
afterAll(() => p.cleanup());

test("the HTTP latency histogram has buckets up to +Inf, _sum and _count", () => {
	const series = (suffix: string) =>
		text.split("\n").filter((l) => l.startsWith(`gateway_http_request_duration_${suffix}{`) && l.includes('route="/content/notes"') && l.includes('method="GET"'));
	expect(series("bucket").some((l) => l.includes('le="+Inf"'))).toBe(true);
	expect(series("sum")).toHaveLength(1);
	expect(series("count")).toEqual([expect.stringMatching(/ 1$/)]);
	expect(text).not.toMatch(/quantile=|_rate\{|nodeID=/);
});

(promtool ? test : test.skip)("promtool check metrics accepts the platform's own series", () => {
	const r = spawnSync(promtool, ["check", "metrics"], { input: text, encoding: "utf8" });
	expect({ status: r.status, problems: `${r.stdout}${r.stderr}`.trim() }).toEqual({ status: 0, problems: "" });
});
