/**
 * Operations: `/status` of each dependency, a few metrics of `/metrics` drawn as charts (requests, latency, event
 * lag), webhook configs (context/configs with key CQRS) and the collections operators watch (sagas, transactions,
 * files, e-mails, pushes, SMS, stats), each opened in the generic collection view with its actions.
 */
import { useEffect, useRef, useState } from "preact/hooks";
import { api, HttpError, statusPage, text } from "../api";
import type { Catalog } from "../catalog";
import { ErrorBox, Field, Link, Page, Select, Table, useAction } from "../ui";

type Health = { status: string; info: Record<string, { status: string; message?: string; kind?: string; [k: string]: unknown }> };

export function Status() {
	const [health, setHealth] = useState<{ status: number; data: Health } | undefined>(undefined);
	const [, error, run] = useAction();
	useEffect(() => {
		const load = () => void run(async () => setHealth(await statusPage<Health>("/status")));
		load();
		const t = setInterval(load, 5000);
		return () => clearInterval(t);
	}, []);
	return (
		<Page title="Status">
			<ErrorBox error={error} />
			{health && (
				<>
					<p class={health.data.status === "ok" ? "granted" : "denied"}>
						Platform: {health.data.status} (HTTP {health.status})
					</p>
					<Table label="Dependencies" columns={["dependency", "status", "details"]}>
						{Object.entries(health.data.info).map(([name, d]) => (
							<tr key={name} data-dependency={name}>
								<td>{name}</td>
								<td class={d.status === "up" ? "up" : "down"}>{d.status}</td>
								<td>
									{Object.entries(d)
										.filter(([k]) => k !== "status")
										.map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
										.join("; ")}
								</td>
							</tr>
						))}
					</Table>
				</>
			)}
		</Page>
	);
}

/** One sample of the Prometheus text: each series name → the sum of its values over every label set. */
export function sumByName(text: string): Map<string, number> {
	const sums = new Map<string, number>();
	for (const line of text.split("\n")) {
		if (!line || line.startsWith("#")) continue;
		const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
		if (!m) continue;
		const v = Number(m[3]);
		if (Number.isFinite(v)) sums.set(m[1], (sums.get(m[1]) ?? 0) + v);
	}
	return sums;
}

interface Point {
	t: number;
	requests?: number;
	latency?: number;
	pipelineLag?: number;
	webhookLag?: number;
}

/** The chart of one series: an SVG line over the last samples, with its latest value in words. */
function Chart({ title, unit, points }: { title: string; unit: string; points: Array<number | undefined> }) {
	const values = points.filter((v): v is number => v !== undefined);
	const max = Math.max(1e-9, ...values);
	const w = 300;
	const h = 80;
	const step = w / Math.max(1, points.length - 1);
	const line = points
		.map((v, i) => (v === undefined ? null : `${(i * step).toFixed(1)},${(h - (v / max) * (h - 4) - 2).toFixed(1)}`))
		.filter(Boolean)
		.join(" ");
	const last = values[values.length - 1];
	return (
		<figure class="chart">
			<figcaption>
				{title}: <b>{last === undefined ? "no data yet" : `${last < 10 ? last.toFixed(2) : Math.round(last)} ${unit}`}</b>
			</figcaption>
			<svg viewBox={`0 0 ${w} ${h}`} role="img" aria-label={`${title}, the last ${points.length} samples`} preserveAspectRatio="none">
				<polyline points={line} fill="none" class="line" />
			</svg>
		</figure>
	);
}

export function Metrics() {
	const [points, setPoints] = useState<Point[]>([]);
	const [bearer, setBearer] = useState("");
	const [error, setError] = useState<unknown>(undefined);
	const prev = useRef<{ t: number; s: Map<string, number> } | undefined>(undefined);
	useEffect(() => {
		let stop = false;
		const sample = async () => {
			try {
				const s = sumByName(await text("/metrics", bearer || undefined));
				const t = Date.now();
				const p = prev.current;
				prev.current = { t, s };
				setError(undefined);
				if (!p || stop) return;
				const d = (name: string) => (s.get(name) ?? 0) - (p.s.get(name) ?? 0);
				const seconds = (t - p.t) / 1000;
				const count = d("gateway_http_request_duration_count");
				const hooks = d("dispatcher_webhook_lag_seconds_count");
				const point: Point = {
					t,
					requests: d("gateway_http_requests_total") / seconds,
					latency: count > 0 ? (d("gateway_http_request_duration_sum") / count) * 1000 : undefined,
					pipelineLag: s.get("platform_pipeline_lag"),
					webhookLag: hooks > 0 ? d("dispatcher_webhook_lag_seconds_sum") / hooks : undefined,
				};
				setPoints((list) => [...list, point].slice(-60));
			} catch (e) {
				setError(e);
			}
		};
		void sample();
		const timer = setInterval(sample, 3000);
		return () => ((stop = true), clearInterval(timer));
	}, [bearer]);
	const needsToken = error instanceof HttpError && error.status === 401;
	return (
		<Page title="Metrics">
			<p class="muted">Sampled from /metrics every 3 s while this page is open (this gateway's process).</p>
			<ErrorBox error={error} />
			{needsToken && (
				<form aria-label="Metrics token" onSubmit={(e) => e.preventDefault()}>
					<Field label="METRICS_TOKEN (kept in this page only)" type="password" value={bearer} onInput={setBearer} autoComplete="off" />
				</form>
			)}
			<div class="charts">
				<Chart title="Requests" unit="per second" points={points.map((p) => p.requests)} />
				<Chart title="Latency (mean)" unit="ms" points={points.map((p) => p.latency)} />
				<Chart title="Event lag (events waiting, JetStream)" unit="events" points={points.map((p) => p.pipelineLag)} />
				<Chart title="Webhook delivery lag (mean)" unit="s" points={points.map((p) => p.webhookLag)} />
			</div>
		</Page>
	);
}

type Config = { id: string; key: string; eid?: string; value?: { webhook?: string; active?: boolean; disabled_at?: string; disabled_reason?: string } };

export function Webhooks() {
	const [items, setItems] = useState<Config[]>([]);
	const [url, setUrl] = useState("");
	const [, error, run] = useAction();
	const [busy, err, act] = useAction();
	const load = () =>
		void run(async () => setItems((await api<{ items: Config[] }>("GET", "/context/configs", { query: { query: { key: "CQRS" }, pagination: { limit: 100 } } })).data.items));
	useEffect(load, []);
	return (
		<Page title="Webhooks">
			<p class="muted">
				A tenant's webhook is its `CQRS` config: every change of its documents is posted there. Secrets and the Authorization value are write-only: never shown again.
			</p>
			<ErrorBox error={error} />
			<Table label="Webhook configs" columns={["config", "client", "webhook", "state"]}>
				{items.map((c) => (
					<tr key={c.id} data-id={c.id}>
						<td>
							<Link to={`/ops/webhooks/${c.id}`}>{c.id}</Link>
						</td>
						<td>{c.eid ?? ""}</td>
						<td>{c.value?.webhook ?? ""}</td>
						<td>{c.value?.active === false ? `disabled ${c.value.disabled_at ?? ""}: ${c.value.disabled_reason ?? ""}` : "active"}</td>
					</tr>
				))}
			</Table>
			<form
				class="panel"
				aria-label="New webhook"
				onSubmit={(e) => {
					e.preventDefault();
					void act(async () => {
						await api("POST", "/context/configs", { body: { key: "CQRS", value: { webhook: url.trim() } } });
						setUrl("");
						load();
					});
				}}
			>
				<h2>New webhook</h2>
				<Field label="Webhook URL" type="url" value={url} onInput={setUrl} placeholder="https://hooks.example.com/platform" required />
				<ErrorBox error={err} />
				<button type="submit" disabled={busy}>
					Register
				</button>
			</form>
			<p class="muted">Open a config to see its deliveries (state, attempts, next try, last error) and send a failed one again.</p>
		</Page>
	);
}

/** The operations index: each watched collection, opened in the generic view with its actions. */
export function Operations({ catalog }: { catalog: Catalog }) {
	const watched: Array<[string, string, string]> = [
		["essential", "sagas", "state, commit, abort"],
		["financial", "transactions", "state, verify, abort"],
		["special", "files", "upload, download, share links"],
		["touch", "emails", "sent and scheduled e-mails"],
		["touch", "pushes", "Web Push records"],
		["touch", "smss", "SMS records"],
		["special", "stats", "counts of changes"],
	];
	return (
		<Page title="Operations">
			<ul class="cards">
				<li>
					<Link to="/ops/status">Status</Link> <span class="muted">each dependency, as /status reports it</span>
				</li>
				<li>
					<Link to="/ops/metrics">Metrics</Link> <span class="muted">requests, latency, event lag</span>
				</li>
				<li>
					<Link to="/ops/webhooks">Webhooks</Link> <span class="muted">CQRS configs, their deliveries, redelivery</span>
				</li>
				<li>
					<Link to="/ops/audit">Audit trail</Link> <span class="muted">every request answered and document changed</span>
				</li>
				{watched
					.filter(([s, c]) => catalog.find(s, c))
					.map(([s, c, what]) => (
						<li key={`${s}/${c}`}>
							<Link to={`/${s}/${c}`}>{`${s} / ${c}`}</Link> <span class="muted">{what}</span>
						</li>
					))}
			</ul>
		</Page>
	);
}

type Delivery = {
	id: string;
	topic: string;
	op: string;
	document_id: string;
	status: string;
	attempts: number;
	next_at: string;
	last_status: number | null;
	last_error: string | null;
	created_at: string;
	delivered_at: string | null;
};
type PageOf<T> = { items: T[]; next: string | null };

/**
 * A page-at-a-time listing newest first (`{ items, next }`): the first page, then older ones appended by "Older".
 * `reload` starts again from the newest (after a filter changed, or an action).
 */
function usePages<T>(load: (before: string | undefined) => Promise<PageOf<T>>, deps: unknown[]) {
	const [items, setItems] = useState<T[]>([]);
	const [next, setNext] = useState<string | null>(null);
	const [busy, error, run] = useAction();
	const reload = () =>
		void run(async () => {
			const p = await load(undefined);
			setItems(p.items);
			setNext(p.next);
		});
	const older = () =>
		void run(async () => {
			if (next === null) return;
			const p = await load(next);
			setItems((list) => [...list, ...p.items]);
			setNext(p.next);
		});
	useEffect(reload, deps);
	return { items, next, busy, error, reload, older };
}

const when = (iso: string | null) => (iso ? new Date(iso).toLocaleString() : "");

/** One webhook config: its state and its deliveries, with a Redeliver button on each failed or disabled one. */
export function WebhookDeliveries({ id }: { id: string }) {
	const [config, setConfig] = useState<Config | undefined>(undefined);
	const [status, setStatus] = useState("");
	const [, configError, runConfig] = useAction();
	const [acting, actError, act] = useAction();
	const [done, setDone] = useState("");
	const loadConfig = () => void runConfig(async () => setConfig((await api<{ data: Config }>("GET", `/context/configs/${id}`)).data.data));
	useEffect(loadConfig, [id]);
	const pages = usePages<Delivery>(
		async (before) => (await api<PageOf<Delivery>>("GET", `/context/configs/${id}/deliveries`, { query: { status, before, limit: "20" } })).data,
		[id, status],
	);
	const redeliver = (d: Delivery) =>
		void act(async () => {
			setDone("");
			await api("POST", `/context/configs/${id}/deliveries/${d.id}/redeliver`);
			setDone(`Delivery ${d.id} queued again.`);
			pages.reload();
			loadConfig();
		});
	return (
		<Page
			title={`Webhook ${id}`}
			actions={
				<button type="button" onClick={() => (pages.reload(), loadConfig())}>
					Refresh
				</button>
			}
		>
			<ErrorBox error={configError} />
			{config && (
				<p>
					{config.value?.webhook ?? ""} ·{" "}
					<span class={config.value?.active === false ? "denied" : "granted"}>
						{config.value?.active === false ? `disabled ${config.value.disabled_at ?? ""}: ${config.value.disabled_reason ?? ""}` : "active"}
					</span>
				</p>
			)}
			<form class="filters" aria-label="Delivery filter" onSubmit={(e) => e.preventDefault()}>
				<Select label="Status" value={status} onChange={setStatus} options={[["", "any"], "pending", "delivered", "failed", "disabled"]} />
			</form>
			<ErrorBox error={pages.error} />
			<ErrorBox error={actError} />
			{done && <p role="status">{done}</p>}
			<Table label="Deliveries" columns={["delivery", "change", "document", "status", "attempts", "next try", "last answer", "created", "delivered", ""]}>
				{pages.items.map((d) => (
					<tr key={d.id} data-id={d.id} data-status={d.status}>
						<td>{d.id}</td>
						<td>{`${d.topic} ${d.op}`}</td>
						<td>{d.document_id}</td>
						<td class={d.status === "delivered" ? "up" : d.status === "pending" ? "" : "down"}>{d.status}</td>
						<td>{d.attempts}</td>
						<td>{d.status === "pending" ? when(d.next_at) : ""}</td>
						<td>{[d.last_status ?? "", d.last_error ?? ""].filter(Boolean).join(": ")}</td>
						<td>{when(d.created_at)}</td>
						<td>{when(d.delivered_at)}</td>
						<td>
							{(d.status === "failed" || d.status === "disabled") && (
								<button type="button" disabled={acting} aria-label={`Redeliver ${d.id}`} onClick={() => redeliver(d)}>
									Redeliver
								</button>
							)}
						</td>
					</tr>
				))}
			</Table>
			{!pages.items.length && !pages.busy && <p class="muted">No deliveries{status ? ` ${status}` : ""}.</p>}
			{pages.next !== null && (
				<button type="button" disabled={pages.busy} onClick={pages.older}>
					Older
				</button>
			)}
		</Page>
	);
}

type AuditEntry = {
	id: string;
	at: string;
	kind: string;
	method: string | null;
	path: string | null;
	action: string | null;
	service: string | null;
	collection: string | null;
	document_id: string | null;
	op: string | null;
	status: number | null;
	duration_ms: number | null;
	uid: string | null;
	aid: string | null;
	cid: string | null;
	ip: string | null;
	replayed: boolean | null;
};

/** A `datetime-local` value (the browser's time zone) as an ISO instant; "" stays unset. */
const instant = (v: string) => (v ? new Date(v).toISOString() : undefined);

/** The audit trail (GET /general/activities/audit): newest first, with its filters. */
export function Audit() {
	const [form, setForm] = useState({ from: "", to: "", kind: "", path: "", action: "", user: "", client: "", status: "" });
	const [applied, setApplied] = useState(form);
	const set = (k: keyof typeof form) => (v: string) => setForm((f) => ({ ...f, [k]: v }));
	const pages = usePages<AuditEntry>(
		async (before) =>
			(await api<PageOf<AuditEntry>>("GET", "/general/activities/audit", { query: { ...applied, from: instant(applied.from), to: instant(applied.to), before, limit: "50" } }))
				.data,
		[applied],
	);
	return (
		<Page
			title="Audit trail"
			actions={
				<button type="button" onClick={pages.reload}>
					Refresh
				</button>
			}
		>
			<p class="muted">Every request answered and every document changed, newest first: your tenant's, or every tenant's for the operator.</p>
			<form
				class="panel filters"
				aria-label="Audit filter"
				onSubmit={(e) => {
					e.preventDefault();
					setApplied({ ...form });
				}}
			>
				<div class="field">
					<label for="audit-from">From</label>
					<input id="audit-from" type="datetime-local" value={form.from} onInput={(e) => set("from")((e.currentTarget as HTMLInputElement).value)} />
				</div>
				<div class="field">
					<label for="audit-to">To</label>
					<input id="audit-to" type="datetime-local" value={form.to} onInput={(e) => set("to")((e.currentTarget as HTMLInputElement).value)} />
				</div>
				<Select label="Kind" value={form.kind} onChange={set("kind")} options={[["", "any"], "request", "change"]} />
				<Field label="Path starts with" value={form.path} onInput={set("path")} placeholder="/content/notes" />
				<Field label="Action" value={form.action} onInput={set("action")} placeholder="content.notes.create" />
				<Field label="User id" value={form.user} onInput={set("user")} />
				<Field label="Client id" value={form.client} onInput={set("client")} />
				<Field label="HTTP status" value={form.status} onInput={set("status")} inputMode="numeric" />
				<button type="submit">Apply</button>
			</form>
			<ErrorBox error={pages.error} />
			<Table label="Audit entries" columns={["at", "kind", "what", "document", "status", "user", "client", "ip", "ms"]}>
				{pages.items.map((e) => (
					<tr key={e.id} data-id={e.id} data-kind={e.kind}>
						<td>{when(e.at)}</td>
						<td>{e.kind}</td>
						<td>{e.kind === "request" ? `${e.method} ${e.path}` : `${e.action} ${e.service}/${e.collection}`}</td>
						<td>{e.document_id ?? ""}</td>
						<td>{e.status === null ? "" : `${e.status}${e.replayed ? " (replayed)" : ""}`}</td>
						<td>{e.uid ?? e.aid ?? ""}</td>
						<td>{e.cid ?? ""}</td>
						<td>{e.ip ?? ""}</td>
						<td>{e.duration_ms === null ? "" : e.duration_ms.toFixed(1)}</td>
					</tr>
				))}
			</Table>
			{!pages.items.length && !pages.busy && <p class="muted">No entries.</p>}
			{pages.next !== null && (
				<button type="button" disabled={pages.busy} onClick={pages.older}>
					Older
				</button>
			)}
		</Page>
	);
}
