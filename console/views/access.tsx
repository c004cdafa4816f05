/**
 * Identity and access: tenants (domain/clients and their domains), users and their roles, groups (as users'
 * `subjects` name them), personal tokens (auth/apts: a new token is shown once), grants (auth/grants) with an editor
 * that checks a grant as the API does before sending it, and the explainer on POST /auth/can.
 */
import { useEffect, useState } from "preact/hooks";
import { api, currentSession } from "../api";
import type { Catalog } from "../catalog";
import { cellText, ErrorBox, Field, Json, Link, Notice, Page, Table, useAction } from "../ui";

type Doc = Record<string, any> & { id: string };

function useList(path: string, query?: Record<string, unknown>): [Doc[], unknown, () => void] {
	const [items, setItems] = useState<Doc[]>([]);
	const [, error, run] = useAction();
	const load = () =>
		void run(async () => setItems((await api<{ items: Doc[] }>("GET", path, { query: { pagination: { limit: 100, sort: { created_at: -1 } }, ...query } })).data.items));
	useEffect(load, [path, JSON.stringify(query)]);
	return [items, error, load];
}

function Rows({ items, columns, label, to }: { items: Doc[]; columns: string[]; label: string; to?: (d: Doc) => string }) {
	return (
		<Table label={label} columns={columns}>
			{items.map((d) => (
				<tr key={d.id} data-id={d.id}>
					{columns.map((c) => (
						<td key={c}>{c === "id" && to ? <Link to={to(d)}>{d.id}</Link> : c in d ? cellText(d[c]) : ""}</td>
					))}
				</tr>
			))}
		</Table>
	);
}

const list = (s: string) =>
	s
		.split(",")
		.map((x) => x.trim())
		.filter(Boolean);

export function Tenants() {
	const [items, error, reload] = useList("/domain/clients");
	const [name, setName] = useState("");
	const [domains, setDomains] = useState("");
	const [created, setCreated] = useState<Doc | undefined>(undefined);
	const [busy, err, run] = useAction();
	return (
		<Page title="Tenants">
			<p class="muted">A tenant is a client with its own domains; its users sign in through it.</p>
			<ErrorBox error={error} />
			<Rows items={items} columns={["id", "name", "domains", "scopes", "status"]} label="Clients" to={(d) => `/domain/clients/${d.id}`} />
			<form
				class="panel"
				aria-label="New tenant"
				onSubmit={(e) => {
					e.preventDefault();
					void run(async () => {
						const r = await api<{ data: Doc }>("POST", "/domain/clients", { body: { name: name.trim(), domains: list(domains), scopes: ["whole"] } });
						setCreated(r.data.data);
						setName("");
						reload();
					});
				}}
			>
				<h2>New tenant</h2>
				<Field label="Name" value={name} onInput={setName} required />
				<Field label="Domains (comma-separated)" value={domains} onInput={setDomains} placeholder="acme.example" required />
				<ErrorBox error={err} />
				<button type="submit" disabled={busy}>
					Create tenant
				</button>
			</form>
			{created && (
				<Notice>
					Client {created.id} created. Its secret is shown this once: <code class="secret">{String(created.secret ?? "(none returned)")}</code>
				</Notice>
			)}
		</Page>
	);
}

export function Users() {
	const [items, error, reload] = useList("/identity/users");
	const [username, setUsername] = useState("");
	const [password, setPassword] = useState("");
	const [roles, setRoles] = useState("");
	const [editing, setEditing] = useState<Doc | undefined>(undefined);
	const [subjects, setSubjects] = useState("");
	const [busy, err, run] = useAction();
	return (
		<Page title="Users and roles">
			<p class="muted">A user's subjects are its roles (`@editor`) and groups (`team.example`), written without the domain: the token adds it.</p>
			<ErrorBox error={error} />
			<Table label="Users" columns={["id", "username", "subjects", "status", "roles"]}>
				{items.map((u) => (
					<tr key={u.id} data-id={u.id}>
						<td>
							<Link to={`/identity/users/${u.id}`}>{u.id}</Link>
						</td>
						<td>{u.username ?? u.email ?? u.phone ?? ""}</td>
						<td>{"subjects" in u ? (u.subjects ?? []).join(", ") : ""}</td>
						<td>{u.status ?? ""}</td>
						<td>
							<button
								type="button"
								class="secondary"
								aria-label={`Edit roles of ${u.username ?? u.id}`}
								onClick={() => (setEditing(u), setSubjects((u.subjects ?? []).join(", ")))}
							>
								Edit roles
							</button>
						</td>
					</tr>
				))}
			</Table>
			{editing && (
				<form
					class="panel"
					aria-label="Roles"
					onSubmit={(e) => {
						e.preventDefault();
						void run(async () => {
							await api("PATCH", `/identity/users/${editing.id}`, { body: { subjects: list(subjects) } });
							setEditing(undefined);
							reload();
						});
					}}
				>
					<h2>Roles and groups of {editing.username ?? editing.id}</h2>
					<Field label="Subjects (comma-separated)" value={subjects} onInput={setSubjects} placeholder="@editor, team.example" />
					<button type="submit" disabled={busy}>
						Save roles
					</button>
				</form>
			)}
			<form
				class="panel"
				aria-label="New user"
				onSubmit={(e) => {
					e.preventDefault();
					void run(async () => {
						await api("POST", "/identity/users", { body: { username: username.trim(), password, subjects: list(roles) } });
						setUsername("");
						setPassword("");
						reload();
					});
				}}
			>
				<h2>New user</h2>
				<Field label="Username" value={username} onInput={setUsername} required autoComplete="off" />
				<Field label="Password" type="password" value={password} onInput={setPassword} required autoComplete="new-password" hint="At least 8 characters." />
				<Field label="Subjects (comma-separated)" value={roles} onInput={setRoles} placeholder="@editor" />
				<ErrorBox error={err} />
				<button type="submit" disabled={busy}>
					Create user
				</button>
			</form>
		</Page>
	);
}

/** Groups are names in users' `subjects` (an email or an FQDN; roles start with `@`): each with its members. */
export function Groups() {
	const [items, error] = useList("/identity/users");
	const groups = new Map<string, string[]>();
	for (const u of items) for (const s of (u.subjects ?? []) as string[]) if (!s.startsWith("@")) groups.set(s, [...(groups.get(s) ?? []), u.username ?? u.id]);
	return (
		<Page title="Groups">
			<p class="muted">A group is a name in users' subjects; a grant to `&lt;group&gt;@&lt;domain&gt;` applies to its members, and documents' `groups` open the group zone.</p>
			<ErrorBox error={error} />
			<Table label="Groups" columns={["group", "members"]}>
				{[...groups].map(([g, members]) => (
					<tr key={g}>
						<td>{g}</td>
						<td>{members.join(", ")}</td>
					</tr>
				))}
			</Table>
			{!groups.size && <p class="muted">No user you can read belongs to a group.</p>}
		</Page>
	);
}

export function Apts() {
	const [items, error, reload] = useList("/auth/apts");
	const [name, setName] = useState("");
	const [scopes, setScopes] = useState("");
	const [days, setDays] = useState("30");
	const [token, setToken] = useState<{ id: string; token: string } | undefined>(undefined);
	const [busy, err, run] = useAction();
	return (
		<Page title="Personal tokens (APTs)">
			<ErrorBox error={error} />
			<Table label="APTs" columns={["id", "name", "scopes", "expires", "revoke"]}>
				{items.map((a) => (
					<tr key={a.id} data-id={a.id}>
						<td>{a.id}</td>
						<td>{a.name}</td>
						<td>{(a.scopes ?? []).join(" ")}</td>
						<td>{a.expires_at ? new Date(a.expires_at).toLocaleString() : "never"}</td>
						<td>
							<button
								type="button"
								class="danger"
								aria-label={`Revoke ${a.name}`}
								disabled={busy}
								onClick={() => void run(async () => (await api("DELETE", `/auth/apts/${a.id}`), reload()))}
							>
								Revoke
							</button>
						</td>
					</tr>
				))}
			</Table>
			<form
				class="panel"
				aria-label="New APT"
				onSubmit={(e) => {
					e.preventDefault();
					void run(async () => {
						const body: Record<string, unknown> = { name: name.trim() };
						if (list(scopes).length) body.scopes = list(scopes);
						if (Number(days) > 0) body.expires_at = Date.now() + Number(days) * 86_400_000;
						const r = await api<{ data: { id: string; token: string } }>("POST", "/auth/apts", { body });
						setToken({ id: r.data.data.id, token: r.data.data.token });
						setName("");
						reload();
					});
				}}
			>
				<h2>New APT</h2>
				<Field label="Name" value={name} onInput={setName} required />
				<Field label="Scopes (comma-separated; none: yours)" value={scopes} onInput={setScopes} placeholder="read:content" />
				<Field label="Expires in days (0: never)" value={days} onInput={setDays} inputMode="numeric" />
				<ErrorBox error={err} />
				<button type="submit" disabled={busy}>
					Create APT
				</button>
			</form>
			{token && (
				<section class="panel once" aria-labelledby="apt-once">
					<h2 id="apt-once">Your new token</h2>
					<p>Copy it now: it is shown this once and cannot be read again.</p>
					<code class="secret" data-apt={token.id}>
						{token.token}
					</code>
					<div class="row">
						<button type="button" onClick={() => void navigator.clipboard?.writeText(token.token)}>
							Copy
						</button>
						<button type="button" class="secondary" onClick={() => setToken(undefined)}>
							I have copied it
						</button>
					</div>
				</section>
			)}
		</Page>
	);
}

const IP_OR_CIDR = /^(\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?|[0-9a-fA-F:]+(\/\d{1,3})?)$/;

/**
 * The checks POST /auth/grants makes (docs/api.md, "Grants"), made before sending so the editor names a mistake at
 * once. The API checks again and has the last word: its 400 is shown as it comes.
 */
export function grantProblems(
	g: { subject: string; action: string; object: string; field: string[]; filter: string[]; location: string[]; cron: string; duration: string },
	catalog: Catalog,
): string[] {
	const out: string[] = [];
	const parts = g.subject.split("@");
	if (!g.subject.trim()) out.push("subject is required");
	else if (parts.length < 2 || !parts[parts.length - 1] || (g.subject.startsWith("@") && parts.length < 3)) out.push(`subject '${g.subject}' needs a domain suffix (@<domain>)`);
	if (!g.action.trim()) out.push("action is required");
	const [svc, col] = g.object.split(":");
	const service = catalog.services.find((s) => s.name === svc);
	if (!g.object.trim()) out.push("object is required");
	else if (!service) out.push(`object: '${g.object}' names no service (services: ${catalog.services.map((s) => s.name).join(", ")})`);
	else if (col !== "*" && !service.collections.some((c) => c.name === col))
		out.push(`object: '${g.object}' is not a collection (collections of ${svc}: ${service.collections.map((c) => c.name).join(", ")}; or ${svc}:* for all)`);
	g.filter.forEach((f, i) => {
		try {
			const v = JSON.parse(f);
			if (!v || typeof v !== "object" || Array.isArray(v)) out.push(`filter[${i}] must be a JSON object`);
		} catch {
			out.push(`filter[${i}] is not valid JSON`);
		}
	});
	g.location.forEach((l, i) => IP_OR_CIDR.test(l) || out.push(`location[${i}] must be an IP address or a CIDR range`));
	if (g.cron.trim() && !/^(\S+\s+){4,5}\S+$/.test(g.cron.trim())) out.push("time[0].cron_exp must be a cron expression of 5 or 6 fields");
	if (g.cron.trim() && !(Number.isInteger(Number(g.duration)) && Number(g.duration) > 0)) out.push("time[0].duration must be a positive number of seconds");
	return out;
}

export function Grants({ catalog }: { catalog: Catalog }) {
	const [filterSubject, setFilterSubject] = useState("");
	const [items, error, reload] = useList("/auth/grants", filterSubject ? { query: { subject: filterSubject } } : undefined);
	const [subject, setSubject] = useState("");
	const [action, setAction] = useState("read");
	const [object, setObject] = useState("");
	const [field, setField] = useState("");
	const [filter, setFilter] = useState("");
	const [location, setLocation] = useState("");
	const [cron, setCron] = useState("");
	const [duration, setDuration] = useState("");
	const [problems, setProblems] = useState<string[]>([]);
	const [made, setMade] = useState<Doc | undefined>(undefined);
	const [busy, err, run] = useAction();
	const objects = catalog.services.flatMap((s) => [`${s.name}:*`, ...s.collections.map((c) => `${s.name}:${c.name}`)]);
	const specials = [...new Set(catalog.services.flatMap((s) => s.collections.flatMap((c) => c.specials.map((x) => x.operationId.split("_").pop()!))))];
	return (
		<Page title="Grants">
			<form class="row wrap" aria-label="Find grants" onSubmit={(e) => e.preventDefault()}>
				<Field label="Subject (exact)" value={filterSubject} onInput={setFilterSubject} placeholder="@editor@acme.example" />
			</form>
			<ErrorBox error={error} />
			<Rows items={items} columns={["id", "subject", "action", "object", "field", "filter", "location", "time"]} label="Grants" to={(d) => `/auth/grants/${d.id}`} />
			<form
				class="panel"
				aria-label="Grant editor"
				onSubmit={(e) => {
					e.preventDefault();
					const g = {
						subject: subject.trim(),
						action: action.trim(),
						object: object.trim(),
						field: list(field),
						filter: filter
							.split("\n")
							.map((s) => s.trim())
							.filter(Boolean),
						location: list(location),
						cron,
						duration,
					};
					const found = grantProblems(g, catalog);
					setProblems(found);
					if (found.length) return;
					void run(async () => {
						const body: Record<string, unknown> = { subject: g.subject, action: g.action, object: g.object };
						if (g.field.length) body.field = g.field;
						if (g.filter.length) body.filter = g.filter;
						if (g.location.length) body.location = g.location;
						if (cron.trim()) body.time = [{ cron_exp: cron.trim(), duration: Number(duration) }];
						setMade((await api<{ data: Doc }>("POST", "/auth/grants", { body })).data.data);
						reload();
					});
				}}
			>
				<h2>Grant editor</h2>
				<datalist id="grant-objects">
					{objects.map((o) => (
						<option key={o} value={o} />
					))}
				</datalist>
				<datalist id="grant-actions">
					{["read", "write", "manage", ...specials].map((o) => (
						<option key={o} value={o} />
					))}
				</datalist>
				<Field
					label="Subject"
					value={subject}
					onInput={setSubject}
					placeholder={`@editor@${currentSession()?.claims.domain ?? "acme.example"}`}
					hint="@role@domain, user id@domain, username@domain, client id@domain or group@domain"
				/>
				<Field label="Action" value={action} onInput={setAction} list="grant-actions" hint="read, write, manage (each covers the ones before), or a special action" />
				<Field label="Object" value={object} onInput={setObject} list="grant-objects" placeholder="content:notes" />
				<Field label="Fields (comma-separated; none: every field)" value={field} onInput={setField} placeholder="title, status" />
				<Field label="Row filters (one JSON object per line)" value={filter} onInput={setFilter} multiline={2} placeholder='{"owner": "{{token.uid}}"}' />
				<Field label="Locations (IPs or CIDR ranges, comma-separated)" value={location} onInput={setLocation} placeholder="10.0.0.0/8" />
				<div class="row wrap">
					<Field label="Time window: cron" value={cron} onInput={setCron} placeholder="0 9 * * 1-5" />
					<Field label="Time window: duration (s)" value={duration} onInput={setDuration} inputMode="numeric" placeholder="28800" />
				</div>
				{problems.length > 0 && (
					<ul class="error" role="alert" aria-label="Problems">
						{problems.map((p) => (
							<li key={p}>{p}</li>
						))}
					</ul>
				)}
				<ErrorBox error={err} />
				<button type="submit" disabled={busy}>
					Create grant
				</button>
				{made && <Notice>Grant {made.id} created.</Notice>}
			</form>
			<Can catalog={catalog} />
		</Page>
	);
}

/** "Can X do Y on Z, and which grant decides": POST /auth/can with the policies that allow it. */
function Can({ catalog }: { catalog: Catalog }) {
	const [subjects, setSubjects] = useState("");
	const [action, setAction] = useState("read");
	const [object, setObject] = useState(catalog.services[0] ? `${catalog.services[0].name}:${catalog.services[0].collections[0]?.name}` : "");
	const [fields, setFields] = useState("");
	const [answer, setAnswer] = useState<{ granted: boolean; policies?: Doc[]; denied_fields?: string[]; allowed_fields?: string[] } | undefined>(undefined);
	const [busy, err, run] = useAction();
	return (
		<form
			class="panel"
			aria-label="Explain access"
			onSubmit={(e) => {
				e.preventDefault();
				void run(async () => {
					const body: Record<string, unknown> = { action: action.trim(), object: object.trim() };
					if (list(subjects).length) body.subjects = list(subjects);
					if (list(fields).length) body.fields = list(fields);
					setAnswer((await api<{ data: typeof answer }>("POST", "/auth/can", { body, headers: { "x-can-with-policies": "true" } })).data.data);
				});
			}}
		>
			<h2>Can … ?</h2>
			<p class="muted">Asks the platform whether a subject may do an action on a collection, and which grants decide.</p>
			<Field label="Subjects (comma-separated; none: you)" value={subjects} onInput={setSubjects} placeholder="@editor@acme.example" />
			<Field label="Can action" value={action} onInput={setAction} list="grant-actions" />
			<Field label="On object" value={object} onInput={setObject} list="grant-objects" />
			<Field label="Fields (optional)" value={fields} onInput={setFields} />
			<ErrorBox error={err} />
			<button type="submit" disabled={busy}>
				Explain
			</button>
			{answer && (
				<div class="answer" aria-live="polite">
					<p class={answer.granted ? "granted" : "denied"} data-granted={String(answer.granted)}>
						{answer.granted ? "Granted" : "Not granted"}
					</p>
					{answer.denied_fields && <p>Fields refused: {answer.denied_fields.join(", ") || "none"}</p>}
					{answer.policies && answer.policies.length > 0 && (
						<>
							<h3>Deciding grants</h3>
							<Json value={answer.policies} />
						</>
					)}
				</div>
			)}
		</form>
	);
}

export const ACCESS_VIEWS = { tenants: Tenants, users: Users, groups: Groups, apts: Apts } as const;
