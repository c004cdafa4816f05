/**
 * One collection: a page of its documents as the caller may see them (GET /<service>/<collection> with `query`,
 * `pagination`, `projection`, `zone`), kept up to date by a live cursor with the same view, a form to create one,
 * and the collection's special actions. Columns are the fields the answers carry: a field the caller's grant hides
 * is not in any answer, so it has no column (absent, not blank).
 */
import { useEffect, useMemo, useState } from "preact/hooks";
import { api } from "../api";
import type { Catalog, CollectionInfo, FieldInfo } from "../catalog";
import { openLive, type Change } from "../live";
import { Specials } from "./specials";
import { cellText, Check, ErrorBox, Field, Link, navigate, Page, parseJson, Select, Table, useAction } from "../ui";

type Doc = Record<string, unknown> & { id: string };

/** The settable fields every collection has (docs/api.md, "Shape of every request and answer"). */
const COMMON = new Set(["ref", "description", "tags", "groups", "shares", "props", "version", "identity", "relations"]);

const OPERATORS: Array<[string, string]> = [
	["$eq", "="],
	["$ne", "≠"],
	["$gt", ">"],
	["$gte", "≥"],
	["$lt", "<"],
	["$lte", "≤"],
	["$regex", "matches"],
	["$in", "in (comma list)"],
	["$exists", "exists (true/false)"],
];

interface Condition {
	field: string;
	op: string;
	value: string;
}

/** A condition's value as the query notation wants it: numbers and booleans typed, `$in` a list. */
function valueOf(c: Condition, field?: FieldInfo): unknown {
	const typed = (s: string): unknown => {
		const t = s.trim();
		if (field?.type === "number" || field?.type === "integer") return t === "" ? t : Number(t);
		if (field?.type === "boolean" || c.op === "$exists") return t === "true";
		return t;
	};
	if (c.op === "$in") return c.value.split(",").map(typed);
	return typed(c.value);
}

export function queryOf(conditions: Condition[], fields: FieldInfo[]): Record<string, unknown> {
	const q: Record<string, Record<string, unknown>> = {};
	for (const c of conditions) {
		if (!c.field) continue;
		const v = valueOf(
			c,
			fields.find((f) => f.name === c.field),
		);
		(q[c.field] ??= {})[c.op] = v;
	}
	// `{ field: { $eq: v } }` is written `{ field: v }`, as people read it.
	return Object.fromEntries(Object.entries(q).map(([k, ops]) => [k, Object.keys(ops).length === 1 && "$eq" in ops ? ops.$eq : ops]));
}

export function CollectionView({ catalog, col }: { catalog: Catalog; col: CollectionInfo }) {
	const path = `/${col.service}/${col.name}`;
	const [conditions, setConditions] = useState<Condition[]>([]);
	const [raw, setRaw] = useState(false);
	const [rawText, setRawText] = useState("{}");
	// No sort by default: the API's own order, which any grant allows (a field list may not cover `created_at`).
	const [sortField, setSortField] = useState("");
	const [sortDir, setSortDir] = useState("-1");
	const [limit, setLimit] = useState("10");
	const [skip, setSkip] = useState(0);
	const [zones, setZones] = useState<string[]>([]);
	const [projection, setProjection] = useState("");
	/** The view the table shows; the form edits a draft of it until "Apply". */
	const [view, setView] = useState<{ query?: unknown; pagination: unknown; projection?: unknown; zone?: string }>({ pagination: { limit: 10, skip: 0 } });
	const [items, setItems] = useState<Doc[]>([]);
	const [total, setTotal] = useState(0);
	const [fresh, setFresh] = useState<Record<string, string>>({});
	const [events, setEvents] = useState<Array<Change & { at: string }>>([]);
	const [liveState, setLiveState] = useState("off");
	const [, error, run, setError] = useAction();

	// Another collection: everything starts over.
	useEffect(() => {
		setConditions([]);
		setRaw(false);
		setRawText("{}");
		setSkip(0);
		setZones([]);
		setProjection("");
		setEvents([]);
		setSortField("");
		setView({ pagination: { limit: 10, skip: 0 } });
	}, [path]);

	const liveKey = JSON.stringify([path, view.query, view.projection, view.zone]);
	/** The view whose list the API answered: the live cursor opens only for it (a refused list opens no stream). */
	const [liveFor, setLiveFor] = useState("");
	useEffect(() => {
		setFresh({});
		void run(async () => {
			const r = await api<{ items: Doc[]; total: number }>("GET", path, { query: view });
			setItems(r.data.items);
			setTotal(r.data.total);
			setLiveFor(liveKey);
		});
	}, [path, JSON.stringify(view)]);

	// The live cursor follows the same view (query, projection, zone): documents entering, changing, leaving it.
	useEffect(() => {
		if (liveFor !== liveKey) return;
		const params = { query: view.query, projection: view.projection, zone: view.zone };
		return openLive(path, params, {
			onLive: () => undefined,
			onState: setLiveState,
			onChange: (c) => {
				setEvents((list) => [{ ...c, at: new Date().toLocaleTimeString() }, ...list].slice(0, 20));
				setFresh((m) => ({ ...m, [c.id]: c.op }));
				setItems((list) => {
					const i = list.findIndex((d) => d.id === c.id);
					if (c.op === "leave") return i < 0 ? list : list.filter((d) => d.id !== c.id);
					if (!c.data) return list;
					if (i >= 0) return list.map((d) => (d.id === c.id ? (c.data as Doc) : d));
					return [c.data as Doc, ...list];
				});
				if (c.op === "enter") setTotal((t) => t + 1);
				if (c.op === "leave") setTotal((t) => Math.max(0, t - 1));
			},
		});
	}, [liveKey, liveFor]);

	const apply = (nextSkip = 0) => {
		try {
			const query = raw ? parseJson(rawText, "the query") : queryOf(conditions, col.fields);
			const fields = projection
				.split(",")
				.map((s) => s.trim())
				.filter(Boolean);
			setSkip(nextSkip);
			setError(undefined);
			setView({
				query: query && Object.keys(query as object).length ? query : undefined,
				pagination: { limit: Number(limit), skip: nextSkip, ...(sortField ? { sort: { [sortField]: Number(sortDir) } } : {}) },
				projection: fields.length ? Object.fromEntries(fields.map((f) => [f, 1])) : undefined,
				zone: zones.length ? zones.join(",") : undefined,
			});
		} catch (e) {
			setError(e);
		}
	};

	const columns = useMemo(() => {
		const present = new Set<string>();
		for (const d of items) for (const k of Object.keys(d)) present.add(k);
		// The collection's own fields first, then the settable fields every collection has, then who and when.
		const own = col.fields.filter((f) => !f.readOnly && !COMMON.has(f.name)).map((f) => f.name);
		const order = ["id", ...own, ...COMMON, "owner", "created_at", "updated_at"];
		const cols = order.filter((k, i) => present.has(k) && order.indexOf(k) === i);
		return [...cols, ...[...present].filter((k) => !cols.includes(k))].slice(0, 8);
	}, [items, col]);

	const fieldNames = col.fields.map((f) => f.name);
	const limitNum = Number(limit);

	return (
		<Page
			title={`${col.service} / ${col.name}`}
			actions={
				<Link to={`/${col.service}/${col.name}/new`} class="button">
					New document
				</Link>
			}
		>
			<p class="muted">{col.description}</p>
			<form
				class="query"
				aria-label="Query"
				onSubmit={(e) => {
					e.preventDefault();
					apply(0);
				}}
			>
				<fieldset>
					<legend>Filter</legend>
					<Check label="Raw JSON" checked={raw} onChange={(v) => (setRaw(v), v && setRawText(JSON.stringify(queryOf(conditions, col.fields), null, 1)))} />
					{raw ? (
						<Field
							label="Query (JSON)"
							value={rawText}
							onInput={setRawText}
							multiline={4}
							hint='Document-store notation: {"status": "OPEN", "created_at": {"$gte": "2026-01-01"}}'
						/>
					) : (
						<div class="conditions">
							{conditions.map((c, i) => (
								<div class="row condition" key={i}>
									<Select
										label={`Field ${i + 1}`}
										value={c.field}
										options={["", ...fieldNames]}
										onChange={(v) => setConditions(conditions.map((x, j) => (j === i ? { ...x, field: v } : x)))}
									/>
									<Select label={`Operator ${i + 1}`} value={c.op} options={OPERATORS} onChange={(v) => setConditions(conditions.map((x, j) => (j === i ? { ...x, op: v } : x)))} />
									<Field label={`Value ${i + 1}`} value={c.value} onInput={(v) => setConditions(conditions.map((x, j) => (j === i ? { ...x, value: v } : x)))} />
									<button type="button" class="secondary" aria-label={`Remove condition ${i + 1}`} onClick={() => setConditions(conditions.filter((_, j) => j !== i))}>
										×
									</button>
								</div>
							))}
							<button type="button" class="secondary" onClick={() => setConditions([...conditions, { field: fieldNames[0] ?? "", op: "$eq", value: "" }])}>
								Add condition
							</button>
						</div>
					)}
				</fieldset>
				<div class="row wrap">
					<Select label="Sort by" value={sortField} options={["", ...new Set(["created_at", "updated_at", ...fieldNames])]} onChange={setSortField} />
					<Select
						label="Order"
						value={sortDir}
						options={[
							["-1", "descending"],
							["1", "ascending"],
						]}
						onChange={setSortDir}
					/>
					<Select label="Page size" value={limit} options={["10", "25", "50", "100"]} onChange={setLimit} />
					<Field label="Fields (projection)" value={projection} onInput={setProjection} placeholder="title, status" />
				</div>
				<fieldset class="row wrap">
					<legend>Zones (none: the API's default, own and share)</legend>
					{catalog.zones.map((z) => (
						<Check key={z} label={z} checked={zones.includes(z)} onChange={(v) => setZones(v ? [...zones, z] : zones.filter((x) => x !== z))} />
					))}
				</fieldset>
				<button type="submit">Apply</button>
			</form>
			<ErrorBox error={error} />
			<div class="table-head row wrap">
				<p aria-live="polite">{total === 0 ? "No documents" : `${skip + 1}–${Math.min(skip + items.length, skip + limitNum)} of ${total}`}</p>
				<p class={`live live-${liveState.split(" ")[0]}`}>Live: {liveState}</p>
				<div class="row">
					<button type="button" class="secondary" disabled={skip === 0} onClick={() => apply(Math.max(0, skip - limitNum))}>
						Previous page
					</button>
					<button type="button" class="secondary" disabled={skip + limitNum >= total} onClick={() => apply(skip + limitNum)}>
						Next page
					</button>
				</div>
			</div>
			<Table label={`${col.service}/${col.name} documents`} columns={columns}>
				{items.map((d) => (
					<tr key={d.id} data-id={d.id} class={fresh[d.id] ? `fresh-${fresh[d.id]}` : undefined}>
						{columns.map((c) => (
							<td key={c} data-field={c}>
								{c === "id" ? <Link to={`/${col.service}/${col.name}/${d.id}`}>{d.id}</Link> : c in d ? cellText(d[c]).slice(0, 120) : ""}
							</td>
						))}
					</tr>
				))}
			</Table>
			<section aria-labelledby="live-title" class="panel">
				<h2 id="live-title">Live changes</h2>
				<ol class="events" aria-live="polite">
					{events.map((e, i) => (
						<li key={i} data-op={e.op}>
							<span class={`op op-${e.op}`}>{e.op}</span> <Link to={`/${col.service}/${col.name}/${e.id}`}>{e.id}</Link> <small>{e.at}</small>
						</li>
					))}
				</ol>
				{!events.length && <p class="muted">Changes to this view appear here as they happen.</p>}
			</section>
			<Specials col={col} />
		</Page>
	);
}

/** A new document: its fields as JSON, created by POST; then its own page. */
export function NewDocument({ col }: { col: CollectionInfo }) {
	const settable = col.fields.filter((f) => !f.readOnly);
	const [text, setText] = useState("{\n  \n}");
	const [busy, error, run] = useAction();
	return (
		<Page title={`New document in ${col.service} / ${col.name}`}>
			<form
				onSubmit={(e) => {
					e.preventDefault();
					void run(async () => {
						const r = await api<{ data: Doc }>("POST", `/${col.service}/${col.name}`, { body: parseJson(text, "the document") ?? {} });
						navigate(`/${col.service}/${col.name}/${r.data.data.id}`);
					});
				}}
			>
				<Field label="Document (JSON)" value={text} onInput={setText} multiline={12} hint={`Fields: ${settable.map((f) => `${f.name} (${f.type})`).join(", ")}`} />
				<ErrorBox error={error} />
				<button type="submit" disabled={busy}>
					Create
				</button>
			</form>
		</Page>
	);
}
