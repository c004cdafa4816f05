/**
 * The Grafana dashboard (deploy/grafana/dashboards/platform.json) reads only what the platform exports: a platform
 * serves requests, a refused one and a webhook delivery, then every metric name in every panel's query has its
 * `# TYPE` line in the gateway's /metrics (histograms by their base name) or is a metric the platform registered and
 * reports once it has a value (a failure counter before the first failure). A panel on a metric that was renamed or
 * never existed fails here instead of showing "No data" to an operator.
 */
import { createServer, type Server } from "http";
import type { AddressInfo } from "net";
import { readFileSync } from "fs";
import path from "path";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

const DASHBOARD = path.resolve(__dirname, "../../deploy/grafana/dashboards/platform.json");

/** PromQL's own words (functions, aggregations, keywords): what is left of an expression's identifiers are metric names. */
const PROMQL = new Set(
	"sum min max avg count rate irate increase delta histogram_quantile topk bottomk clamp_min clamp_max by without on ignoring group_left group_right and or unless abs absent time vector scalar label_replace le".split(
		" ",
	),
);

/** The metric names a PromQL expression reads (label names inside braces and strings left out). */
export function metricNames(expr: string): string[] {
	const bare = expr
		.replace(/"[^"]*"/g, '""')
		.replace(/\{[^}]*\}/g, "")
		.replace(/\[[^\]]*\]/g, "");
	const names = new Set<string>();
	for (const m of bare.matchAll(/(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\s*(\(|\{|\[|\)|,|$|\s|\/|\*|\+|-|>|<))/g)) {
		const word = m[1];
		const isFunction = /^\s*\(/.test(bare.slice(m.index! + word.length));
		if (!PROMQL.has(word) && !isFunction && !/^\d/.test(word)) names.add(word);
	}
	// Words inside `by (...)` are labels.
	for (const g of bare.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) for (const l of g[1].split(",")) names.delete(l.trim());
	return [...names];
}

let p: TestPlatform;
let receiver: Server;

beforeAll(async () => {
	receiver = createServer((req, res) => {
		req.resume();
		req.on("end", () => res.writeHead(204).end());
	});
	await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
	p = await bootPlatform({ webhookAllowPrivate: true });
});
afterAll(async () => {
	await p?.cleanup();
	await new Promise<void>((resolve) => receiver.close(() => resolve()));
});

test("metricNames reads metric names, not functions, labels or strings", () => {
	expect(metricNames('sum by (status) (rate(gateway_http_requests_total{status=~"5.."}[5m])) / clamp_min(sum(rate(x_total[5m])), 1e-9)').sort()).toEqual([
		"gateway_http_requests_total",
		"x_total",
	]);
	expect(metricNames("histogram_quantile(0.95, sum by (le, config) (rate(dispatcher_webhook_lag_seconds_bucket[5m])))")).toEqual(["dispatcher_webhook_lag_seconds_bucket"]);
	expect(metricNames('sum by (service) (up{job="platform"})')).toEqual(["up"]);
});

test("every query of the dashboard names a metric the platform exports", async () => {
	const token = await p.rootToken();
	const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
	expect((await p.http("POST", "/context/configs", { token, body: { key: "CQRS", eid: p.root.client_id, value: { webhook: url } } })).status).toBe(200);
	const note = await p.http("POST", "/content/notes", { token, body: { title: "for the dashboard" } });
	expect(note.status).toBe(200);
	expect((await p.http("GET", "/content/notes", {})).status).toBe(401);
	expect((await p.http("GET", "/status", {})).status).toBe(200);
	// The webhook delivered: its lag and attempts are counted.
	const text = await waitForValue(
		"a webhook delivery in /metrics",
		async () => {
			const m = await p.http("GET", "/metrics", {});
			return /^dispatcher_webhook_lag_seconds_bucket/m.test(m.text) ? m.text : undefined;
		},
		30_000,
	);
	// Exported: in /metrics now, or registered by the platform (a counter of failures or a gauge of open circuits has no
	// series, hence no line, until it first counts; Prometheus then scrapes it under the same name).
	const registered = (p.broker.metrics.list() as Array<{ name: string }>).map((m) => m.name.replace(/\./g, "_"));
	const exported = new Set([...[...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]), ...registered]);
	// Prometheus' own (`up`) is the scraper's, not the platform's.
	const scraper = new Set(["up"]);
	const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8"));
	const missing: string[] = [];
	for (const panel of dashboard.panels.filter((x: { type: string }) => x.type !== "row"))
		for (const t of panel.targets)
			for (const name of metricNames(t.expr)) {
				const base = name.replace(/_(bucket|sum|count)$/, "");
				if (!scraper.has(name) && !exported.has(name) && !exported.has(base)) missing.push(`${panel.title}: ${name}`);
			}
	expect(missing).toEqual([]);
});
