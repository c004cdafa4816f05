/**
 * Valid request bodies for any catalog collection, derived from its field definitions (types, enums, formats,
 * required fields, collection rules). A few collections carry meaning the catalog cannot express (grant subjects
 * must name a registered domain, APT scopes must be held by the caller, login fields are unique): those values are
 * set here explicitly, everything else comes from the catalog.
 */
import { randomUUID } from "crypto";
import { COLLECTIONS, findCollection, type CollectionRef, type FieldDef } from "../../catalog";

export interface SampleOptions {
	/** Tenant domain of the caller's client (grant subjects must use a registered one). Default `root.local`. */
	domain?: string;
	/** Include optional fields too (default true): exercises more formats. Required fields are always present. */
	optional?: boolean;
}

let counter = 0;
/** Process-unique suffix for fields that must be unique (logins, refs). */
export function unique(): string {
	counter += 1;
	return `${process.pid.toString(36)}${Date.now().toString(36)}${counter.toString(36)}`;
}

export function collectionRef(ref: CollectionRef | string): CollectionRef {
	if (typeof ref !== "string") return ref;
	const [svc, col] = ref.split("/");
	const found = findCollection(svc, col);
	if (!found) throw new Error(`no collection ${ref} in the catalog (known: ${COLLECTIONS.map((c) => c.path).join(", ")})`);
	return found;
}

/** A process-unique E.164 number (`+1415` and 7 digits). */
export function phone(): string {
	counter += 1;
	return `+1415${String(counter % 10_000_000).padStart(7, "0")}`;
}

/** A 24-hex object id, deterministic in `n` but distinct per call. */
export function hexId(n = 0): string {
	counter += 1;
	return (n.toString(16).padStart(8, "0") + counter.toString(16).padStart(16, "0")).slice(-24);
}

/** Fields whose values a collection's hooks constrain beyond the catalog (left to their defaults, or set below). */
const OMIT: Record<string, readonly string[]> = {
	// Scopes and subjects must be held by the caller, coworkers widen visibility: the defaults are the caller's own.
	"auth/apts": ["scopes", "subjects", "coworkers"],
	// Generated and returned once when not given (the sweep checks exactly that).
	"domain/clients": ["secret", "coworkers"],
	// The caller's client is filled in; another client's id is the operator's only, and must name a client.
	"context/configs": ["eid"],
	// `user` must name a user of the caller's tenant, which a sample does not know.
	"financial/wallets": ["user"],
	// Attachments must name files of the caller's view, which a sample does not know.
	"touch/emails": ["attachments"],
};

function scalar(name: string, def: FieldDef, n: number, type = def.type): unknown {
	if (type === "array") return [scalar(name, def, n, def.items ?? "string")];
	if (def.enum && def.enum.length) return def.enum[n % def.enum.length];
	switch (type) {
		case "string":
			switch (def.format) {
				case "objectId":
					return hexId(n);
				case "email":
					return `sample.${n}.${unique()}@example.com`;
				case "e164":
					return phone();
				case "uri":
					return `https://example.com/${name}/${n}`;
				case "uuid":
					return randomUUID();
				case "hex":
					return `deadbeef${n.toString(16)}`;
				case "semver":
					return `1.${n}.0`;
				case "ip-or-cidr":
					return `10.${n % 256}.0.0/16`;
				case "cron":
					return "*/5 * * * *";
				default: {
					const s = `${name} ${n}`;
					return def.maxLength !== undefined ? s.slice(0, def.maxLength) : s;
				}
			}
		case "number":
			return Math.max(def.minimum ?? 0, 0) + n + 0.5;
		case "integer":
			return Math.max(def.minimum ?? 1, 1) + n;
		case "boolean":
			return n % 2 === 0;
		case "date":
			return new Date(Date.UTC(2024, 0, 1 + (n % 28), 12, 0, 0)).toISOString();
		case "object":
			return { sample: n, label: `${name} ${n}` };
		default:
			return { sample: n };
	}
}

/**
 * Values that must name a live record of the platform under test: a transaction links to a saga that exists and
 * that its creator owns. A suite sets `saga` (POST /essential/sagas/start) before building transaction bodies.
 */
export const sampleLinks: { saga?: string } = {};

/** Values the catalog cannot express, per collection. */
function special(path: string, n: number, domain: string): Record<string, unknown> {
	switch (path) {
		case "auth/grants":
			return {
				subject: `@sampler${n}@${domain}`,
				action: "read",
				object: "content:notes",
				field: ["title", "content"],
				filter: [JSON.stringify({ title: { $regex: "^sample" } })],
				location: ["10.0.0.0/8"],
				time: [{ cron_exp: "0 8 * * 1-5", duration: 3600 }],
			};
		case "auth/apts":
			return { expires_at: Date.now() + 24 * 3600 * 1000, strict: false };
		case "domain/clients":
			return { domains: [`tenant-${n}-${unique()}.example.com`], scopes: ["read:content:notes"], grant_types: ["password", "refresh_token"] };
		case "domain/apps":
			return { scopes: ["read:content:notes"] };
		case "identity/users": {
			const u = unique();
			return {
				username: `user-${n}-${u}`,
				email: `user.${n}.${u}@example.com`,
				phone: phone(),
				password: `Sample-pass-${n}-${u}`,
				subjects: ["@sampler"],
			};
		}
		case "context/configs":
			// `eid` omitted: the caller's client is filled in (another client's id is the operator's only, and must exist).
			return { key: `SAMPLE_${n}_${unique()}`, value: { enabled: true, n } };
		case "context/settings":
			return { key: `sample.${n}`, value: { theme: "dark" } };
		case "essential/saga-stages":
			return { req: { query: { n } } };
		case "essential/sagas":
			// A raw saga is created AWAITING with a ttl of 5 to 900 seconds, as `start` makes one: the long end, so a
			// sample outlives a slow suite (a 6 s saga expired under load in the tenancy matrix and its watcher's
			// abort changed it between the test's reads).
			return { state: "AWAITING", ttl: 900 - (n % 896) };
		case "financial/invoices":
			// `PAID` is set by the platform (a payment), never by a body.
			return { status: ["DRAFT", "ISSUED", "CANCELLED"][n % 3] };
		case "financial/transactions":
			return sampleLinks.saga ? { saga: sampleLinks.saga } : {};
		case "touch/pushes":
			return { keys: { p256dh: `BPk${n}sample`, auth: `auth${n}` }, expiration: 1_900_000_000 + n };
		case "touch/emails":
			// Scheduled far ahead: sample messages stay QUEUED (the publisher would otherwise change them while a test reads).
			return { from: `Sample Sender <sender${n}@example.com>`, html: `<p>hello ${n}</p>`, text: `hello ${n}`, date: scheduled(n) };
		case "touch/smss":
			return { receptors: ["+14155550123"], date: scheduled(n) };
		case "touch/push-histories":
			return { next_at: scheduled(n) };
		case "special/stats":
			return { period: "daily", bucket: "2024-01-01", created: n, updated: 0, deleted: 0, restored: 0 };
		default:
			return {};
	}
}

const scheduled = (n: number) => new Date(Date.UTC(2100, 0, 1 + (n % 28), 12, 0, 0)).toISOString();

/** A valid create body for the collection. `n` varies the values (bulk items, several documents). */
export function sampleBody(ref: CollectionRef | string, n = 0, opts: SampleOptions = {}): Record<string, unknown> {
	const c = collectionRef(ref);
	const col = c.collection;
	const optional = opts.optional ?? true;
	const omit = OMIT[c.path] ?? [];
	const values: Record<string, unknown> = {};
	for (const [name, def] of Object.entries(col.fields)) if (!def.internal && !def.readOnly && !omit.includes(name)) values[name] = scalar(name, def, n);
	Object.assign(values, special(c.path, n, opts.domain ?? "root.local"));
	const body: Record<string, unknown> = {};
	for (const [k, v] of Object.entries(values)) if (optional || col.fields[k]?.required) body[k] = v;
	// Rules ("one of a, b"): the first alternative satisfies one that nothing else does.
	for (const rule of col.rules ?? []) if (!rule.anyOf.some((f) => body[f] !== undefined)) body[rule.anyOf[0]] = values[rule.anyOf[0]];
	return body;
}

/**
 * The field a patch changes: the collection's first plain string field (no format, enum or relation, not
 * write-only), else the common `description`. Login fields, grant fields and config keys carry meaning and are left alone.
 */
export function patchField(ref: CollectionRef | string): string {
	const c = collectionRef(ref);
	// A config's key and value cannot be set by a bulk patch (each config's credentials decide): `description` instead.
	// An email's `from` must stay a sender the platform allows: its `subject` instead.
	if (c.path === "identity/users" || c.path === "auth/grants" || c.path === "context/configs") return "description";
	if (c.path === "touch/emails") return "subject";
	const f = Object.entries(c.collection.fields).find(([, d]) => d.type === "string" && !d.format && !d.enum && !d.relation && !d.writeOnly && !d.internal && !d.readOnly);
	return f ? f[0] : "description";
}

/** A valid patch body changing one settable field to a new value. */
export function patchBody(ref: CollectionRef | string, n = 0): Record<string, unknown> {
	const field = patchField(ref);
	const def = collectionRef(ref).collection.fields[field];
	const u = unique();
	// Short fields (currency codes) still get a value no sample has: `p` and the tail of the unique suffix.
	const value = def?.maxLength !== undefined && def.maxLength < 40 ? `p${u.slice(-(def.maxLength - 1))}` : `patched ${n} ${u}`;
	return { [field]: value };
}

/** Every field a response must never carry (write-only and internal ones). */
export function hiddenFields(ref: CollectionRef | string): string[] {
	return Object.entries(collectionRef(ref).collection.fields)
		.filter(([, d]) => d.writeOnly || d.internal)
		.map(([k]) => k);
}
