/**
 * The OpenAPI 3.1 description served at `/api-json`. It is generated from the route table the gateway mounts
 * (`allRoutes()`) and from the catalog, so the document cannot describe an endpoint or a field that the
 * platform does not have, nor miss one that it has.
 */
import { DOMAINS, PLATFORM_FIELDS, SETTABLE_FIELDS, type CollectionDef, type DomainDef, type FieldDef, type FieldFormat, type FieldType } from "../catalog";
import { GRANT_TYPES } from "../catalog/domains/domain";
import { STATUS_NAMES } from "./errors";
import { allRoutes, type RouteDef } from "./routes";
import { GROUP_PATTERN, MAX_ARRAY } from "./validate";
import { SCOPE_PATTERN } from "./oauth-form";
import { PASSWORD_MIN_LENGTH } from "./grant-validation";

type Schema = Record<string, unknown>;

// Read at run time rather than imported so the version is always the one of the package actually deployed.
const pkg = require("../package.json") as { version: string };

/**
 * Same value as MAX_BULK of the collection mixin. Not imported from there because the mixin pulls in the store
 * drivers, which a gateway-only node that just serves this document must not have to load (a unit test keeps
 * the two equal).
 */
export const OPENAPI_MAX_BULK = 1000;

const ref = (kind: "schemas" | "parameters" | "responses", name: string): Schema => ({ $ref: `#/components/${kind}/${name}` });
const json = (schema: Schema) => ({ "application/json": { schema } });
const pascal = (s: string) =>
	s
		.split(/[^A-Za-z0-9]+/)
		.filter(Boolean)
		.map((p) => p[0].toUpperCase() + p.slice(1))
		.join("");

/** `<Domain><Collection>`, e.g. `EssentialSagaStages`: unique because `service/collection` is. */
export function schemaName(d: DomainDef, c: CollectionDef): string {
	return pascal(d.name) + pascal(c.name);
}

// ---------------------------------------------------------------------------------------------------------------
// Fields → JSON Schema

const FORMAT_SCHEMA: Record<FieldFormat, Schema> = {
	objectId: { pattern: "^[0-9a-f]{24}$" },
	email: { format: "email" },
	uri: { format: "uri" },
	uuid: { format: "uuid" },
	// The patterns below are those lib/validate.ts enforces, so a client that validates first gets the same answer.
	e164: { pattern: "^\\+[1-9]\\d{6,14}$" },
	semver: { pattern: "^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-[0-9A-Za-z.-]+)?(?:\\+[0-9A-Za-z.-]+)?$" },
	hex: { pattern: "^[0-9a-fA-F]+$" },
	group: { pattern: GROUP_PATTERN },
	// No JSON Schema format expresses these two; the description carries the rule instead.
	"ip-or-cidr": {},
	cron: {},
};

const FORMAT_HINT: Partial<Record<FieldFormat, string>> = {
	"ip-or-cidr": "IP address or CIDR range",
	cron: "cron expression",
	e164: "phone number in E.164 format",
	semver: "SemVer version",
	objectId: "24-hex object id",
};

/** Requests accept a date as ISO 8601 or Unix milliseconds; responses always carry the normalised ISO string. */
type Mode = "doc" | "write";

function scalar(type: FieldType, format: FieldFormat | undefined, values: readonly string[] | undefined, mode: Mode): Schema {
	let s: Schema;
	switch (type) {
		case "date":
			s = mode === "doc" ? { type: "string", format: "date-time" } : { type: ["string", "integer"], format: "date-time" };
			break;
		case "any":
			s = {};
			break;
		case "object":
			s = { type: "object" };
			break;
		case "array":
			s = { type: "array" };
			break;
		default:
			s = { type };
	}
	if (format && type === "string") Object.assign(s, FORMAT_SCHEMA[format]);
	if (values) s.enum = [...values];
	return s;
}

function describe(def: FieldDef, mode: Mode): string | undefined {
	const parts = [def.description];
	const hint = def.format && FORMAT_HINT[def.format];
	if (hint && !def.description?.includes(hint)) parts.push(def.type === "array" ? `items: ${hint}` : hint);
	if (def.type === "date" && mode === "write") parts.push("ISO 8601 or Unix milliseconds");
	if (def.relation) parts.push(`populatable relation to ${def.relation}`);
	if (def.fileRef) parts.push("id of a special/files document (not populatable)");
	const text = parts.filter(Boolean).join("; ");
	return text || undefined;
}

/** Adds `null` as an accepted value (a patch may clear a non-required field, so stored documents can hold null). */
function orNull(s: Schema): Schema {
	if (Array.isArray(s.anyOf)) return { ...s, anyOf: [...s.anyOf, { type: "null" }] };
	if (s.type === undefined) return s; // `any` already admits null
	const out: Schema = { ...s, type: [...(Array.isArray(s.type) ? s.type : [s.type]), "null"] };
	if (Array.isArray(s.enum)) out.enum = [...s.enum, null];
	return out;
}

interface FieldOpts {
	mode: Mode;
	nullable?: boolean;
	readOnly?: boolean;
	/** Drops writeOnly for a value that one response (a create) reveals once. */
	reveal?: string;
}

function fieldSchema(def: FieldDef, refs: Map<string, string>, o: FieldOpts): Schema {
	let s: Schema;
	if (def.type === "array") {
		let items = scalar(def.items ?? "any", def.format, def.enum, o.mode);
		if (o.mode === "doc" && def.relation && refs.has(def.relation)) items = { anyOf: [items, ref("schemas", refs.get(def.relation)!)] };
		s = { type: "array", items, maxItems: MAX_ARRAY };
	} else {
		s = scalar(def.type, def.format, def.enum, o.mode);
		if (def.maxLength !== undefined) s.maxLength = def.maxLength;
		if (def.minimum !== undefined) s.minimum = def.minimum;
		// A populated relation replaces the id by the target document.
		if (o.mode === "doc" && def.relation && refs.has(def.relation)) s = { anyOf: [s, ref("schemas", refs.get(def.relation)!)] };
	}
	if (o.nullable) s = orNull(s);
	const description = o.reveal ?? describe(def, o.mode);
	if (description) s.description = description;
	if (def.example !== undefined && !(def.writeOnly && o.mode === "doc" && o.reveal === undefined)) s.examples = [def.example];
	if (o.readOnly) s.readOnly = true;
	if (def.writeOnly && o.reveal === undefined) s.writeOnly = true;
	return s;
}

/** Platform fields that stay null or absent until the matching change happens. */
const NULLABLE_PLATFORM = new Set(["deleted_at", "deleted_by", "deleted_in", "restored_at", "restored_by", "restored_in"]);

/**
 * Write-only values that a create response reveals exactly once (the collection hooks add them to that response):
 * described here because the catalog only says "never returned".
 */
const REVEALED_ON_CREATE: Record<string, Record<string, string>> = {
	"auth/apts": { token: "The personal token itself, `APT-<suffix>`; returned only in the creation response, never again" },
	"domain/clients": { secret: "client_secret; returned only in the creation response, and only when the platform generated it" },
};

/** What the platform writes in its helper fields (engine/collection.mixin.ts: `randomHelper(12)`, `String(Date.now())`). */
const PLATFORM_PATTERNS: Record<string, string> = { rand: "^[A-Za-z0-9_-]{16}$", timestamp: "^[0-9]{1,16}$" };

function docSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>, reveal: Record<string, string> = {}): Schema {
	const properties: Record<string, Schema> = {};
	for (const [k, def] of Object.entries(PLATFORM_FIELDS)) {
		properties[k] = fieldSchema(def, refs, { mode: "doc", readOnly: true, nullable: NULLABLE_PLATFORM.has(k) });
		if (PLATFORM_PATTERNS[k]) properties[k].pattern = PLATFORM_PATTERNS[k];
	}
	for (const [k, def] of Object.entries(SETTABLE_FIELDS)) properties[k] = fieldSchema(def, refs, { mode: "doc", nullable: true });
	for (const [k, def] of Object.entries(c.fields))
		if (!def.internal || k in reveal) properties[k] = fieldSchema(def, refs, { mode: "doc", nullable: !def.required, reveal: reveal[k], readOnly: def.readOnly });
	// Only `id` is in every answer: a projection, a populate `select` or a grant's field list may leave out any other
	// field. What an answer that nothing narrowed always holds is the `<Name>Full` schema's list (fullSchema).
	return {
		type: "object",
		description:
			`${c.description} (${d.name}/${c.name}): a document as any read returns it. A \`projection\`, a populate \`select\` or a grant's field list ` +
			`returns a subset of these fields, so only \`id\` is certain; an answer that nothing narrowed is a \`${schemaName(d, c)}Full\`. Write-only fields are never returned.`,
		required: ["id"],
		properties,
	};
}

/**
 * The documents of a collection as one caller reads them (the MCP `collections` tool): the fields of `fields` (null:
 * every field) and `id`, nothing write-only, relations as their plain ids, no examples. A grant's dotted entry
 * (`props.color`) shows its top-level field. Self-contained: no `$ref` into the OpenAPI document.
 */
export function documentSchema(d: DomainDef, c: CollectionDef, fields: readonly string[] | null): Schema {
	const all = docSchema(d, c, new Map()).properties as Record<string, Schema>;
	const shown = fields === null ? null : new Set(fields.map((f) => f.split(".")[0]));
	const properties: Record<string, Schema> = {};
	for (const [k, s] of Object.entries(all)) {
		if (s.writeOnly || (k !== "id" && shown && !shown.has(k))) continue;
		const { examples: _examples, ...rest } = s;
		properties[k] = rest;
	}
	return { type: "object", description: `${c.description} (${d.name}/${c.name})`, required: ["id"], properties };
}

/**
 * The platform fields every stored document holds from its creation on (the engine's create, `platformDoc`): an
 * answer that no projection and no field list narrowed carries each of them (`deleted_at` null while live; `shares`,
 * `groups`, `version` null once a patch cleared them). `deleted_by`, `restored_*` appear only with their change.
 */
export const ALWAYS_RETURNED = [
	"id",
	"owner",
	"clients",
	"created_at",
	"created_by",
	"created_in",
	"updated_at",
	"updated_by",
	"updated_in",
	"deleted_at",
	"shares",
	"groups",
	"version",
	"rand",
	"timestamp",
] as const;

/** The fields an un-narrowed answer of the collection always holds: the platform's, and the collection's required ones that are returned. */
export function fullyReturned(c: CollectionDef): string[] {
	return [
		...ALWAYS_RETURNED,
		...Object.entries(c.fields)
			.filter(([, f]) => f.required && !f.internal && !f.writeOnly)
			.map(([k]) => k),
	];
}

/**
 * `<Name>Full`: the document as a read returns it when nothing narrows the caller's view (no `projection`, no
 * populate `select`, a grant without a field list), every field it always holds required. Narrowed answers are
 * `<Name>` (only `id` required): a field a grant can hide cannot be required of every answer (docs/api.md, "Fields
 * of an answer").
 */
function fullSchema(d: DomainDef, c: CollectionDef): Schema {
	return {
		description:
			`A ${d.name}/${c.name} document read in full: what every answer carries when no \`projection\`, populate \`select\` or grant field list narrows it. ` +
			`A narrowed answer is a \`${schemaName(d, c)}\` (only \`id\` certain).`,
		allOf: [ref("schemas", schemaName(d, c))],
		required: fullyReturned(c),
	};
}

/** An answer's document: in full, or narrowed by a projection or a grant's field list (`id` and what the view keeps). */
function viewOf(name: string, narrowed = name): Schema {
	return { anyOf: [ref("schemas", `${name}Full`), ref("schemas", narrowed)] };
}

/** Rules a collection's hooks enforce on a written field beyond its catalog entry (services/identity.service.ts). */
const WRITE_RULES: Record<string, Record<string, { schema: Schema; rule: string }>> = {
	"identity/users": { password: { schema: { minLength: PASSWORD_MIN_LENGTH }, rule: `at least ${PASSWORD_MIN_LENGTH} characters (NIST SP 800-63B)` } },
};

function writeField(d: DomainDef, c: CollectionDef, k: string, s: Schema): Schema {
	const r = WRITE_RULES[`${d.name}/${c.name}`]?.[k];
	return r ? { ...s, ...r.schema, description: [s.description, r.rule].filter(Boolean).join("; ") } : s;
}

function bodyProperties(d: DomainDef, c: CollectionDef, patch: boolean, refs: Map<string, string>): Record<string, Schema> {
	const properties: Record<string, Schema> = {};
	for (const [k, def] of Object.entries(SETTABLE_FIELDS)) properties[k] = fieldSchema(def, refs, { mode: "write", nullable: patch });
	for (const [k, def] of Object.entries(c.fields))
		if (!def.internal && !def.readOnly) properties[k] = writeField(d, c, k, fieldSchema(def, refs, { mode: "write", nullable: patch && !def.required }));
	return properties;
}

function createSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>): Schema {
	const s: Schema = {
		type: "object",
		description: `A new ${d.name}/${c.name} document. Platform-managed fields (id, owner, clients, created_*, ...) are refused with 400.`,
		additionalProperties: false,
		properties: bodyProperties(d, c, false, refs),
	};
	const required = Object.entries(c.fields)
		.filter(([, f]) => f.required)
		.map(([k]) => k);
	if (required.length) s.required = required;
	// Collection rules ("one of username, email or phone") become anyOf-of-required, so validators enforce them too.
	const rules = (c.rules ?? []).map((r) => ({ anyOf: r.anyOf.map((f) => ({ required: [f] })), description: r.message }));
	if (rules.length === 1) Object.assign(s, { anyOf: rules[0].anyOf });
	else if (rules.length > 1) s.allOf = rules;
	if (rules.length) s.description += ` Rules: ${(c.rules ?? []).map((r) => r.message).join("; ")}.`;
	return s;
}

function patchSchema(d: DomainDef, c: CollectionDef, refs: Map<string, string>): Schema {
	return {
		type: "object",
		description: `Fields of a ${d.name}/${c.name} document to change; omitted fields stay unchanged, null clears a non-required field.`,
		additionalProperties: false,
		minProperties: 1,
		properties: bodyProperties(d, c, true, refs),
	};
}

// ---------------------------------------------------------------------------------------------------------------
// Schemas of the spec's tables

const str = (description?: string): Schema => (description ? { type: "string", description } : { type: "string" });
const strList = (description?: string): Schema => ({ type: "array", items: { type: "string" }, ...(description ? { description } : {}) });

const SPEC_SCHEMAS: Record<string, Schema> = {
	Error: {
		type: "object",
		description: "Body of every error response.",
		required: ["statusCode", "message", "error"],
		properties: {
			statusCode: { type: "integer", description: "HTTP status code" },
			message: str("What went wrong; for invalid input it names the offending field"),
			error: str("HTTP status name, e.g. `Bad Request`"),
		},
	},
	TokenRequest: {
		type: "object",
		description:
			"JSON body of POST /auth/token. The client's credentials (`client_id`, `client_secret`) come in the body or in `Authorization: Basic` (security scheme `clientBasic`), not both; " +
			"without either the answer is 400 `client_id is required`.",
		required: ["grant_type"],
		properties: {
			grant_type: { type: "string", enum: [...GRANT_TYPES, "client_credentials"], description: "`client_credentials` (RFC 6749 §4.4) is an alias of `client_credential`" },
			client_id: str("Required on every grant: here, or as the user name of `Authorization: Basic`"),
			client_secret: str("Required for `client_credential`: here, or as the password of `Authorization: Basic` (not both)"),
			app_id: str("Id of an app of the client (domain/apps): the token carries `aid` and the app's scopes"),
			username: str("Username, email or phone (password grant)"),
			password: str("Password or one-time code (password grant)"),
			refresh_token: str("For the `refresh_token` grant; single-use"),
			code: str("For the `authorization_code` grant"),
			response_type: str("Optional"),
			state: str("Optional"),
			strict: { type: "boolean", description: "If true the issued token carries `strict: true` and every request with it needs `x-api-key`" },
			domain: str("Optional tenant domain"),
			scopes: {
				type: "array",
				items: { type: "string", pattern: SCOPE_PATTERN },
				description: "Restrict the token to a subset of the allowed scopes: `<action>:<service>[:<collection>]` of an existing service and collection, or `whole` (400 otherwise)",
			},
			subjects: strList("Override ABAC subjects"),
			coworkers: strList("Additional coworker client ids"),
			source: str("Optional"),
		},
		// The per-grant requirements of the spec's "Grant types" table, so a validating client catches them early.
		allOf: [
			{ if: { properties: { grant_type: { const: "password" } }, required: ["grant_type"] }, then: { required: ["username", "password"] } },
			{ if: { properties: { grant_type: { const: "refresh_token" } }, required: ["grant_type"] }, then: { required: ["refresh_token"] } },
			{ if: { properties: { grant_type: { const: "authorization_code" } }, required: ["grant_type"] }, then: { required: ["code"] } },
		],
	},
	TokenResponse: {
		type: "object",
		required: ["token_type", "access_token", "expires_in", "scope"],
		properties: {
			token_type: { type: "string", const: "Bearer", description: "Always `Bearer`" },
			access_token: str("JWT for the Authorization header"),
			refresh_token: str("Present when the grant supports session rotation; absent for `client_credential`"),
			expires_in: { type: "integer", description: "Seconds until the access token expires" },
			scope: str("Space-separated scopes actually granted (may be narrower than requested)"),
			domain: str("Tenant domain of the session"),
			subject: str("ABAC subject string embedded in the token"),
			coworker: str("Space-separated coworker client ids, if any"),
			session: str("Session record id, present only on some grants"),
		},
	},
	TokenClaims: {
		type: "object",
		required: ["type", "strict", "cid", "scope", "domain", "subject", "session", "client_id"],
		properties: {
			type: { type: "string", enum: ["access", "refresh"], description: "Access tokens call APIs; refresh tokens cannot" },
			strict: { type: "boolean", description: "Requires the `x-api-key` header" },
			cid: str("Client id owning the session"),
			aid: str("App id"),
			uid: str("Authenticated user id"),
			scope: str("Space-separated scopes"),
			domain: str("Tenant domain"),
			subject: str("Space-separated ABAC subjects"),
			tz: str("Timezone name"),
			lang: str("Language code"),
			session: str("Session record id (used for logout and blacklisting)"),
			client_id: str("OAuth client id (equals `cid` in most flows)"),
			coworker: str("Space-separated coworker client ids"),
			iat: { type: "integer", description: "Issued at (Unix seconds)" },
			exp: { type: "integer", description: "Expires at (Unix seconds)" },
		},
	},
	TotpCheck: {
		type: "object",
		description: "Body of POST /auth/check: checks a TOTP code (RFC 6238), not a JWT.",
		required: ["secret", "token"],
		properties: {
			secret: str("TOTP hex secret, AES-encrypted then base64-encoded"),
			token: { type: "string", pattern: "^[0-9]{6}$", description: "The 6-digit code" },
			period: { type: "integer", minimum: 1, default: 30, description: "Seconds" },
			window: { type: "integer", minimum: 0, default: 1, description: "Accepted drift, in periods, either direction" },
		},
	},
	Policy: {
		type: "object",
		required: ["subject", "action", "object"],
		properties: {
			subject: str("The grant's subject (see Grant)"),
			action: str("The grant's action"),
			object: str("The grant's object"),
			field: { type: ["array", "null"], items: { type: "string" }, description: "The grant's field allowlist; null: all fields" },
			filter: { type: ["array", "null"], items: { type: "string" }, description: "The grant's row filters; null: none" },
			location: strList("The grant's IP/CIDR allowlist"),
		},
	},
	CanRequest: {
		type: "object",
		description: "Body of POST /auth/can.",
		required: ["action", "object"],
		properties: {
			action: str("`read`, `write`, `manage` or a special/custom action"),
			object: str("`service:collection`"),
			fields: strList("Optional field-level check"),
			filter: { type: "object", description: "Optional filter context" },
			subjects: strList("Override; default is the token's subject"),
			strict: { type: "string", enum: ["obj"], description: "`obj`: exact object match, no `service:*` fallback" },
			tz: str("Timezone for time-based grants"),
			ip: str("IP for location-based grants"),
		},
	},
	LoginBlock: {
		type: "object",
		description: "A failed-login counter that reached its limit and blocks (429) until `until`.",
		required: ["id", "counter", "client", "ip", "failures", "limit", "until"],
		properties: {
			id: { type: "string", description: "The block's id in DELETE /auth/login-blocks/{id}", example: "acct:65f1c0a2b3c4d5e6f7a8b9c1:user.65f1c0a2b3c4d5e6f7a8b9c0:203.0.113.7" },
			counter: {
				type: "string",
				enum: ["account", "ip"],
				description: "`account`: one account's failures from `ip` (limit 10); `ip`: every failure through the client from `ip` (limit 100)",
			},
			client: { type: ["string", "null"], description: "The client (tenant) the failures went through; null for client_ids that name no client" },
			account: {
				type: "string",
				enum: ["user", "login", "secret", "code"],
				description: "What was guessed: a user's password (`user`; `login`: a login naming no user), the client's secret, its authorization codes",
			},
			user: { type: "string", description: "The user whose password was guessed (account `user`)" },
			ip: { type: "string", description: "The address the failed logins came from", example: "203.0.113.7" },
			failures: { type: "integer", minimum: 1, description: "Failed logins counted in the window", example: 10 },
			limit: { type: "integer", minimum: 1, description: "The count that blocks: 10 for an account, 100 for every account of the client", example: 10 },
			until: { type: "string", format: "date-time", description: "When the block ends by itself" },
		},
	},
	CanResponse: {
		type: "object",
		required: ["granted"],
		properties: {
			granted: { type: "boolean", description: "With `fields`, a partial result is false plus denied_fields and allowed_fields" },
			policies: { type: "array", items: ref("schemas", "Policy"), description: "With header `x-can-with-policies`" },
			denied_fields: strList("With `fields`: the requested fields no grant allows"),
			allowed_fields: strList("With `fields`: the requested fields a grant allows"),
		},
	},
	ApiToken: {
		type: "object",
		description: "Plaintext of the `x-api-key` header. The header value is its JSON, AES-256-GCM encrypted: " + '`base64url(iv) + "." + base64url(ciphertext ‖ tag)`.',
		required: ["cid", "client_id", "expiration_date"],
		properties: {
			cid: str("Must equal the token's `cid`"),
			client_id: str("Must equal the token's `client_id`"),
			whitelist: strList("CIDR ranges or single IPs; empty or absent means no restriction"),
			expiration_date: {
				anyOf: [
					{ type: "string", format: "date-time" },
					{ type: "integer", description: "Unix milliseconds" },
				],
				description: "Must be in the future",
			},
		},
	},
	GrantTime: {
		type: "object",
		required: ["cron_exp", "duration"],
		properties: {
			cron_exp: str("Opens the window"),
			duration: { type: "number", minimum: 0, description: "Seconds the window stays open" },
		},
	},
	Grant: {
		type: "object",
		description: "An attribute-based access grant (collection auth/grants).",
		required: ["subject", "action", "object"],
		properties: {
			subject: str(
				"Always with a domain the caller's client registers (the operator: any registered domain): `@role@domain` (users carrying the role), " +
					"`<uid|aid|cid>@domain` (one user, app or client; a client's own identity is `<cid>@<domain>`), `<username>@domain`, or a group `<group>@domain`",
			),
			action: str("`read`, `write`, `manage` or a special/custom action"),
			object: str("`service:collection` or `service:*`"),
			field: strList("Field allowlist"),
			filter: strList("Row-level filters: JSON texts in document-store query notation; `{{token.<claim>}}` is replaced by the caller's claim"),
			location: strList("IP/CIDR allowlist"),
			time: { type: "array", items: ref("schemas", "GrantTime"), description: "Access windows; several combine with OR" },
		},
	},
	ChangeEvent: {
		type: "object",
		description: "Change event pushed to a client's CQRS webhook after each write.",
		required: ["id", "ts_ms", "op", "topic", "source"],
		properties: {
			id: str("Document id"),
			ts_ms: { type: "integer", description: "Timestamp in milliseconds" },
			op: { type: "string", enum: ["c", "u", "d", "r"], description: "create, update, delete, restore" },
			topic: str("`{db}.{collection}`"),
			source: {
				type: "object",
				required: ["name", "db", "collection"],
				description: "Where the change happened",
				properties: { name: str("Platform name"), db: str("Service"), collection: str("Collection") },
			},
			after: { type: "object", description: "State after the operation; absent on delete" },
			before: { type: "object", description: "State before the operation; absent on create" },
		},
	},
};

/**
 * The token request as a form (RFC 6749, lib/oauth-form.ts): every value a string; `scope` (or `scopes`),
 * `subjects` and `coworkers` space-delimited words, or the key repeated; `strict` `true` or `false`. Derived from
 * TokenRequest so the two name the same fields.
 */
SPEC_SCHEMAS.TokenForm = (() => {
	const json = SPEC_SCHEMAS.TokenRequest as { properties: Record<string, Schema>; required: string[] };
	const properties: Record<string, Schema> = {};
	for (const [k, p] of Object.entries(json.properties)) {
		const description = p.description as string | undefined;
		if (p.type === "array")
			properties[k] = { anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }], description: `${description ?? k}; space-delimited words, or the key repeated` };
		else if (p.type === "boolean") properties[k] = { type: "string", enum: ["true", "false"], description };
		else properties[k] = { type: "string", ...(p.enum ? { enum: p.enum } : {}), description };
	}
	properties.scope = { type: "string", description: "Space-delimited scopes (RFC 6749 §3.3), as `scopes`; give one of the two" };
	return {
		type: "object",
		description:
			"Form body of POST /auth/token (`application/x-www-form-urlencoded`), as OAuth 2.0 clients send it. The client's credentials in the form or in `Authorization: Basic`, not both. Any other key given twice answers 400 (RFC 6749 §3.2).",
		required: json.required,
		properties,
	};
})();

// ---------------------------------------------------------------------------------------------------------------
// Parameters and responses

const qp = (name: string, description: string, schema: Schema = { type: "string" }): Schema => ({ name, in: "query", required: false, description, schema });
const hp = (name: string, description: string): Schema => ({ name, in: "header", required: false, description, schema: { type: "string" } });

const PARAMETERS: Record<string, Schema> = {
	id: {
		name: "id",
		in: "path",
		required: true,
		description: "Document id (24-hex object id); on GET with `ref=true`, the document's `ref`",
		schema: { type: "string" },
	},
	query: qp(
		"query",
		"Filter as a JSON object string in document-store query notation (operators such as `$regex`, `$gte`, `$in`, `$or`); `{}` matches all. `$where`, `$function`, `$expr` and JavaScript answer 400.",
	),
	pagination: qp("pagination", "JSON object string `{ limit: number, skip: number, sort: { <field>: 1 or -1 } }`; `limit` default 10, at most 100; `skip` ≥ 0."),
	projection: qp("projection", "JSON object string `{ <field>: 1 }` including only the listed fields (`{ <field>: 0 }` excludes them)."),
	populate: qp(
		"populate",
		"Expands relation fields: a JSON array of `{ path, select?, match? }` or a comma-separated list of paths. Only fields the collection declares as relations can be populated; paths without a read grant are dropped.",
	),
	zone: qp(
		"zone",
		"Comma-separated list from `own`, `share`, `group`, `client`; default `own,share`. Zones combine by OR; an unknown zone answers 400. May also be sent as header `x-zone`.",
	),
	ref: qp("ref", "`true`: the path value is the document's `ref` instead of its id.", { type: "string", enum: ["true", "false"] }),
	live: qp(
		"live",
		"`true`: after the matches, instead of `event: end`, one `event: live` frame and then one `event: change` frame per change of the caller's view (`data: { op: enter | update | leave, id, data? }`, `id: <position>`), decided at each change with the caller's current grants; `Last-Event-ID: <position>` (or `last_event_id`) resumes after a position (410 frame beyond the retention); a 401 frame ends it when the token stops being valid.",
		{ type: "string", enum: ["true", "false"] },
	),
	last_event_id: qp("last_event_id", "With `live=true`: the position to resume after, like the `Last-Event-ID` header."),
	lastEventId: qp("lastEventId", "What EventSource polyfills add on a reconnect: the same as the `Last-Event-ID` header, which wins when both come."),
	token: qp("token", "Alternative carrier of the bearer token (instead of `Authorization: Bearer <token>`; the `authorization` cookie works too)."),
	xZone: hp("x-zone", "Same as the `zone` query parameter (the query parameter wins)."),
	xExcludeSoftDelete: hp("x-exclude-soft-delete-query", "When present (any value), soft-deleted documents are not filtered out."),
	xApiKey: hp("x-api-key", "Required when the token is strict: the encrypted ApiToken (see schema `ApiToken`)."),
	xSagaSession: hp(
		"x-saga-session",
		"Saga id (essential/sagas): the request is applied at once and recorded as a stage of that saga; a write is compensated if the saga is aborted or expires (docs/sagas.md). The saga must be the caller's (404 `saga <id> not found`) and in flight (409 `saga <id> is not in flight`). Echoed in the response.",
	),
	xCanWithPolicies: hp("x-can-with-policies", "When present, the response includes the matching policies."),
	xCanWithIdPolicies: hp("x-can-with-id-policies", "When present, the response includes id-level policies."),
	shareKey: qp("key", "A share key of the file (POST /special/files/{id}/share)."),
	ifMatch: hp(
		"If-Match",
		"Writes only if the document is still as read: `*`, or its `ETag` (a list of tags: any of them). Another tag, or a weak one, answers 412 `precondition failed` and changes nothing; checked atomically with the write.",
	),
	ifNoneMatch: hp("If-None-Match", "The document's `ETag` as last read (a list, `W/` forms or `*` too): 304, no body, while it is still the tag."),
	idempotencyKey: hp(
		"Idempotency-Key",
		"1 to 255 printable ASCII characters (else 400), the caller's own (keys of other principals never meet): the first request runs and its answer (status below 500) is kept for 24 hours; a repeat with the same key, method, path, query and body (an upload: the same fields and files, whatever its multipart boundary) answers it again with `Idempotent-Replayed: true` and does nothing else; the key with another request answers 422, a repeat while the first runs 409. A request answered 5xx (or never answered) is safe to retry with its key: it has written once or not at all.",
	),
	range: hp("range", "One byte range, `bytes=<start>-<end>`, `bytes=<start>-` or `bytes=-<suffix>`: 206 with `Content-Range`; several ranges are ignored (200)."),
};

const ERROR_RESPONSES: Record<number, { name: string; description: string; example: string; retryAfter?: boolean }> = {
	400: { name: "BadRequest", description: "Invalid body, query or parameter; the message names the field", example: "title is required" },
	401: {
		name: "Unauthorized",
		description:
			"Missing, malformed, forged or expired token (`authorization token is required`, the reason in `WWW-Authenticate`), not yet valid (`token not yet valid`: issued ahead of the clock beyond `TOKEN_LEEWAY_SECONDS`), revoked session (`session is revoked`)",
		example: "authorization token is required",
	},
	403: { name: "Forbidden", description: "Scope, grant, strict api-key, location or time check failed", example: "access denied" },
	404: { name: "NotFound", description: "No such document, or one the caller may not see", example: "document not found" },
	405: { name: "MethodNotAllowed", description: "The collection is written only by the platform", example: "touch/push-histories is written by the platform only" },
	409: {
		name: "Conflict",
		description:
			"`ref` already exists in the collection, a saga is not in flight (`saga <id> is not in flight`), a state change the saga or document does not allow, or `insufficient balance`, a wallet that holds money or takes part in a pending transaction (its delete or destroy), or a repeat while the request under its `Idempotency-Key` still runs (`a request with this idempotency key is in progress`: retry later)",
		example: "ref already exists",
	},
	412: {
		name: "PreconditionFailed",
		description: "`If-Match` names no current tag of the document (someone changed it since it was read): nothing changed",
		example: "precondition failed",
	},
	413: { name: "PayloadTooLarge", description: "Request body over its limit: 1 MiB of JSON (64 KiB of a token form)", example: "body must not be larger than 1 MiB" },
	415: {
		name: "UnsupportedMediaType",
		description: "The body is not of the type the operation takes: `application/json` (an upload: multipart/form-data). A body without any Content-Type answers 400",
		example: "this endpoint reads a JSON body: send Content-Type: application/json, not application/x-www-form-urlencoded",
	},
	416: { name: "RangeNotSatisfiable", description: "The range starts past the end of the content (`Content-Range: bytes */<size>`)", example: "range not satisfiable" },
	422: {
		name: "UnprocessableEntity",
		description: "The `Idempotency-Key` was used for another request (another method, path, query or body) within 24 hours",
		example: "idempotency key was used for another request",
	},
	429: {
		name: "TooManyRequests",
		description:
			"Over a limit: the request rate (`RATE_LIMIT`, per principal or IP: `too many requests`), failed logins of an account or through a client from one IP (at most 15 minutes), " +
			"TOTP checks of a session, open cursors of a principal (`too many open cursors`). Wait `Retry-After` seconds where it is sent",
		example: "too many requests",
		retryAfter: true,
	},
	502: { name: "BadGateway", description: "Query enforcement reached without the authentication or grant layer", example: "Bad Gateway" },
	503: {
		name: "ServiceUnavailable",
		description:
			"A service the request needs has no node, or its node went away during a call that may have written, or a store or cache it needs is away or slower than the request's deadline: retry after `Retry-After` seconds (a write with its `Idempotency-Key`)",
		example: "service unavailable",
		retryAfter: true,
	},
	504: {
		name: "GatewayTimeout",
		description: "A service did not answer in time: retry after `Retry-After` seconds (a write with its `Idempotency-Key`)",
		example: "request timed out",
		retryAfter: true,
	},
};

/** Statuses every operation that reaches a service can answer: the rate limit, a service or store away, a timeout. */
const SERVICE_ERRORS = [429, 503, 504];

function responsesComponent(): Record<string, Schema> {
	const out: Record<string, Schema> = {};
	for (const [code, r] of Object.entries(ERROR_RESPONSES)) {
		const statusCode = Number(code);
		out[r.name] = {
			description: r.description,
			...(r.retryAfter ? { headers: { "Retry-After": { description: "Seconds to wait before a retry", schema: { type: "integer", minimum: 0 } } } } : {}),
			content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode, message: r.example, error: STATUS_NAMES[statusCode] } } },
		};
	}
	return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Operations

const envelope = {
	data: (s: Schema): Schema => ({ type: "object", required: ["data"], properties: { data: s } }),
	items: (s: Schema): Schema => ({ type: "object", required: ["items", "total"], properties: { items: { type: "array", items: s }, total: { type: "integer", minimum: 0 } } }),
	total: (): Schema => ({ type: "object", required: ["total"], properties: { total: { type: "integer", minimum: 0 } } }),
	result: (values: string[]): Schema => ({ type: "object", required: ["result"], properties: { result: { type: "string", enum: values } } }),
};

const CURSOR_FRAMES =
	"Server-sent events (send `Accept: text/event-stream`). One frame per document: `id: <id>\\ndata: <json document>\\n\\n`; " +
	"after the last one `event: end\\ndata: close\\n\\n`. A failure mid-stream sends `event: error\\ndata: <error body>\\n\\n` " +
	"(the Error schema). Honours `query`, `pagination`, `projection` and `populate` like the list. " +
	"A reconnect with header `Last-Event-ID: <id>` (an EventSource sends it by itself) resumes after that document. " +
	"An EventSource reconnects whenever a stream ends: close it on `event: end`.";

const ok = (description: string, schema: Schema) => ({ "200": { description, content: json(schema) } });
const ETAG_HEADER = {
	ETag: { description: "The document's entity tag (changes with every change of the document): send it in `If-Match` or `If-None-Match`", schema: { type: "string" } },
};
/** An answer carrying the document's `ETag` (by-id reads and writes). */
const tagged = (description: string, schema: Schema) => ({ "200": { description, headers: ETAG_HEADER, content: json(schema) } });

interface OpParts {
	description?: string;
	parameters?: string[];
	requestBody?: Schema;
	responses: Record<string, Schema>;
	errors: number[];
	/** An error whose meaning on this route differs from the shared response's (401 on /auth/token). */
	errorOverrides?: Record<number, Schema>;
	/** Parameters of this operation only (a special's own query parameters). */
	inlineParameters?: Schema[];
	/** Security requirements of a public operation that accepts credentials of its own (the token endpoint). */
	security?: Schema[];
}

function collectionOp(r: RouteDef, d: DomainDef, c: CollectionDef): OpParts {
	const name = schemaName(d, c);
	const doc = viewOf(name);
	const created = REVEALED_ON_CREATE[`${d.name}/${c.name}`] ? viewOf(name, `${name}Created`) : doc;
	const body = (schema: Schema, description: string): Schema => ({ required: true, description, content: json(schema) });
	const readParams = ["query", "pagination", "projection", "populate", "zone", "xZone", "xExcludeSoftDelete"];
	const base = [400, 401, 403, 502];
	const writeRefused = c.platformWritten ? [405] : [];
	switch (r.op) {
		case "count":
			return { parameters: [...readParams, "xSagaSession"], responses: ok("Number of matching documents", envelope.total()), errors: base };
		case "list":
			return { parameters: [...readParams, "xSagaSession"], responses: ok("A page of documents and the total of matches", envelope.items(doc)), errors: base };
		case "cursor":
			return {
				parameters: [...readParams, "live", "last_event_id", "lastEventId"],
				responses: { "200": { description: CURSOR_FRAMES, content: { "text/event-stream": { schema: { type: "string", description: CURSOR_FRAMES } } } } },
				errors: base,
			};
		case "get":
			return {
				parameters: ["id", "ref", "projection", "populate", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifNoneMatch"],
				responses: {
					...tagged("The document (with `populate`, a weak `ETag`)", envelope.data(doc)),
					"304": { description: "`If-None-Match` names the current tag: not modified, no body", headers: ETAG_HEADER },
				},
				errors: [...base, 404],
			};
		case "create":
			return {
				parameters: ["xSagaSession"],
				requestBody: body(ref("schemas", `${name}Create`), "The new document, without platform-managed fields"),
				responses: ok("The created document", envelope.data(created)),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "bulkCreate":
			return {
				parameters: ["xSagaSession"],
				requestBody: body(
					{
						type: "object",
						required: ["items"],
						additionalProperties: false,
						properties: { items: { type: "array", items: ref("schemas", `${name}Create`), minItems: 1, maxItems: OPENAPI_MAX_BULK } },
					},
					`Up to ${OPENAPI_MAX_BULK} new documents, created together or not at all`,
				),
				responses: ok("The created documents", envelope.items(created)),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "patch":
			return {
				parameters: ["id", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifMatch"],
				requestBody: body(ref("schemas", `${name}Patch`), "Only the fields to change"),
				responses: tagged("The document with the updated fields", envelope.data(doc)),
				errors: [...base, 404, 409, 412, 413, ...writeRefused],
			};
		case "bulkPatch":
			return {
				description: "The filter comes from the query parameters, the fields to set from the body (`ref` cannot be set here: it is unique).",
				parameters: ["query", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession"],
				requestBody: body(ref("schemas", `${name}Patch`), "Fields to set on every matching document"),
				responses: ok("Number of updated documents", envelope.total()),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "remove":
			return {
				parameters: ["id", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifMatch"],
				responses: tagged("The soft-deleted document, `deleted_at` set (its `ETag`: the one a restore's `If-Match` takes)", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		case "restore":
			return {
				parameters: ["id", "zone", "xZone", "xSagaSession", "ifMatch"],
				responses: tagged("The restored document, `deleted_at` cleared", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		case "destroy":
			return {
				description: "Irreversible; applies to live and soft-deleted documents.",
				parameters: ["id", "zone", "xZone", "xSagaSession", "ifMatch"],
				responses: ok("The document as it was before its permanent removal", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		default:
			return genericOp(r);
	}
}

const AUTH_OPS: Record<string, () => OpParts> = {
	"special.files.download": () => {
		const binary = { "*/*": { schema: { type: "string", format: "binary" } } };
		const headers = {
			ETag: { description: "The content's SHA-256 (quoted hex)", schema: { type: "string" } },
			"Content-Disposition": {
				description: "`inline` for images, PDF, plain text, audio and video, else `attachment`; `filename` and RFC 5987 `filename*`",
				schema: { type: "string" },
			},
			"Accept-Ranges": { schema: { type: "string", enum: ["bytes"] } },
		};
		return {
			description:
				"The file's content with its mimetype, `Content-Length`, `ETag` and `Content-Disposition` (and `X-Content-Type-Options: nosniff`), when the request carries a valid share `key` or a bearer (header, `token` query parameter or `authorization` cookie) whose `download` view (scope `download:special:files` and a `download` grant) or `read` view holds the file. Anything else (no key, an expired or revoked key, a bearer that may not read it, a soft-deleted or unknown file) answers 404, never 401 or 403. `If-None-Match` with the etag answers 304.",
			parameters: ["id", "shareKey", "token", "range"],
			responses: {
				"200": { description: "The whole content", headers, content: binary },
				"206": { description: "The requested range, with `Content-Range`", headers, content: binary },
				"304": { description: "Not modified (`If-None-Match` matched the etag)" },
			},
			errors: [404, 416],
		};
	},
	"auth.token": () => ({
		// Public, and a client may authenticate itself with HTTP Basic instead of `client_secret` (RFC 6749 §2.3.1).
		security: [{}, { clientBasic: [] }],
		description:
			"Grant types: `password` (username, password, client_id), `refresh_token` (refresh_token, client_id; the refresh token is single-use), `client_credential` (client_id, client_secret; no refresh token), `authorization_code` (code, client_id).",
		requestBody: {
			required: true,
			description:
				"JSON, or `application/x-www-form-urlencoded` as OAuth 2.0 clients send it (RFC 6749): `scope` space-delimited, client credentials also in `Authorization: Basic`.",
			content: { ...json(ref("schemas", "TokenRequest")), "application/x-www-form-urlencoded": { schema: ref("schemas", "TokenForm") } },
		},
		responses: ok("Issued tokens", envelope.data(ref("schemas", "TokenResponse"))),
		errors: [400, 401, 413, 429],
		errorOverrides: {
			401: {
				description:
					"Wrong credentials (`username or password is invalid`; a wrong client secret: `client secret is invalid for client <client_id>`), or an unknown or expired refresh token. " +
					"A refresh token presented a second time revokes its whole session: every token of it answers 401.",
				content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode: 401, message: "username or password is invalid", error: STATUS_NAMES[401] } } },
			},
		},
	}),
	"auth.verify": () => ({ responses: ok("Claims of the bearer token (JWT or APT)", envelope.data(ref("schemas", "TokenClaims"))), errors: [401, 403] }),
	"auth.logout": () => ({
		description:
			"Deletes the session and blacklists it: every JWT or APT of the session then answers 401, on every gateway. Repeating it answers OK. " +
			"`GET` and `POST` do the same; `POST` takes no body (400 `POST /auth/logout takes no body: ...` otherwise).",
		responses: ok("Session ended", envelope.result(["OK"])),
		errors: [401, 403],
	}),
	"auth.loginBlocks": () => ({
		description:
			"The failed-login blocks in force, newest first (at most 1000; `total` counts them all). The operator (a root-client token) sees every tenant's blocks; " +
			"anyone else (a tenant admin: a `manage` grant on `identity:users`) those counted on its own client only.",
		inlineParameters: ["client", "user", "ip"].map((name) => ({
			name,
			in: "query",
			required: false,
			description: `Only the blocks of this ${name} (exact)`,
			schema: { type: "string", maxLength: 100 },
		})),
		responses: ok("Blocks in force", envelope.items(ref("schemas", "LoginBlock"))),
		errors: [400, 401, 403],
	}),
	"auth.loginUnblock": () => ({
		description:
			"Lifts a failed-login block: its counter starts again from nothing. The operator lifts any block, anyone else those of its own client; another tenant's block, or none, answers 404.",
		inlineParameters: [{ name: "id", in: "path", required: true, description: "The block's `id` from GET /auth/login-blocks", schema: { type: "string" } }],
		responses: ok("Lifted", envelope.result(["OK"])),
		errors: [400, 401, 403, 404],
	}),
	"auth.check": () => ({
		requestBody: { required: true, content: json(ref("schemas", "TotpCheck")) },
		responses: ok("`OK` if the code matches within the window, otherwise `NOK`", envelope.result(["OK", "NOK"])),
		errors: [400, 401, 403, 413],
	}),
	"auth.can": () => ({
		parameters: ["xCanWithPolicies", "xCanWithIdPolicies"],
		requestBody: { required: true, content: json(ref("schemas", "CanRequest")) },
		responses: ok("Grant decision", envelope.data(ref("schemas", "CanResponse"))),
		errors: [400, 401, 403, 413],
	}),
};

/** A special action: body and answer from its catalog entry (SpecialDef `body`, `answer`, `errors`). */
function specialOp(r: RouteDef): OpParts {
	const s = r.special!;
	const d = r.domain!;
	const c = r.collection!;
	const objectOf = (fields: Record<string, FieldDef>): Schema => ({
		type: "object",
		properties: Object.fromEntries(Object.entries(fields).map(([k, def]) => [k, fieldSchema(def, new Map(), { mode: "doc" })])),
	});
	const [kind, target] = (s.answer ?? "").split(":");
	let item: Schema | undefined;
	if (target === "object") item = objectOf(s.answerFields ?? {});
	else if (target) {
		const [svc, col] = target.split("/");
		const other = d.name === svc ? d.collections.find((x) => x.name === col) : undefined;
		item = viewOf(other ? schemaName(d, other) : pascal(`${svc} ${col}`));
	} else if (kind) item = viewOf(schemaName(d, c));
	if (item && target !== "object" && s.answerFields) item = { allOf: [item, objectOf(s.answerFields)] };
	// `page`: newest first, a page at a time; `next` is the `before` of the next page, null at the end.
	const page = (s: Schema): Schema => ({
		type: "object",
		required: ["items", "next"],
		properties: { items: { type: "array", items: s }, next: { type: ["string", "null"], description: "The `before` of the next page (null: no more)" } },
	});
	const answer: Schema = !item
		? {}
		: kind === "items"
			? envelope.items(item)
			: kind === "page"
				? page(item)
				: kind === "data-items"
					? envelope.data(envelope.items(item))
					: envelope.data(item);
	let requestBody: Schema | undefined;
	if (s.body) {
		const properties: Record<string, Schema> = {};
		for (const [k, def] of Object.entries(s.body)) properties[k] = fieldSchema(def, new Map(), { mode: "write" });
		const required = Object.entries(s.body)
			.filter(([, f]) => f.required)
			.map(([k]) => k);
		requestBody = { required: true, content: json({ type: "object", additionalProperties: false, properties, ...(required.length ? { required } : {}) }) };
	}
	const inline = Object.entries(s.query ?? {}).map(([name, def]) => ({
		name,
		in: "query",
		required: !!def.required,
		...(def.description ? { description: def.description } : {}),
		schema: fieldSchema({ ...def, description: undefined }, new Map(), { mode: "write" }),
	}));
	if (s.multipart && requestBody) {
		const form = (requestBody.content as Record<string, Schema>)["application/json"].schema as Schema;
		const properties = { file: { type: "array", items: { type: "string", format: "binary" }, description: "File content (repeatable)" }, ...(form.properties as Schema) };
		requestBody = { required: true, content: { "multipart/form-data": { schema: { type: "object", required: ["file"], properties } } } };
	}
	return {
		description: `Special action \`${s.action}\`.`,
		// A special addressed by id honours If-Match on its document.
		// By id, the caller's view of the document (its zone) counts, as for GET (authority/authority.ts callerView).
		parameters: [
			...new Set([
				...(r.path.includes("/:id") ? ["id", "ifMatch", "zone", "xZone"] : []),
				...(s.listParams ? ["query", ...(s.method === "GET" ? ["pagination"] : []), "zone", "xZone"] : []),
			]),
		],
		inlineParameters: inline,
		requestBody,
		responses: ok(s.description, answer),
		errors: [400, 401, 403, ...(s.errors ?? []), ...(r.path.includes("/:id") ? [412] : []), ...(requestBody ? [413] : [])],
	};
}

/** A route the table may gain later (a special action) still gets a truthful, if less precise, description. */
function genericOp(r: RouteDef): OpParts {
	const hasBody = r.method === "POST" || r.method === "PUT" || r.method === "PATCH";
	return {
		requestBody: hasBody ? { required: false, content: json({ type: "object" }) } : undefined,
		responses: ok("Result of the operation", {}),
		errors: [400, 401, ...(r.public ? [] : [403]), ...(r.path.includes("/:") ? [404] : []), ...(hasBody ? [413] : [])],
	};
}

function tagOf(r: RouteDef): string {
	return r.domain && r.collection ? `${r.domain.name}/${r.collection.name}` : r.path.split("/")[1];
}

const KEYED_METHODS = new Set(["POST", "PATCH", "PUT", "DELETE"]);

function operation(r: RouteDef): Schema {
	const parts =
		r.special && r.domain && r.collection ? specialOp(r) : r.op && r.domain && r.collection ? collectionOp(r, r.domain, r.collection) : (AUTH_OPS[r.action]?.() ?? genericOp(r));
	const description = [
		parts.description,
		r.public ? "Public: no token needed." : r.scope ? `Needs scope \`${r.scope}\` and a matching grant.` : "Needs a valid bearer token.",
		r.collection?.platformWritten && (r.op === "create" || r.op === "bulkCreate" || r.op === "patch" || r.op === "bulkPatch")
			? "This collection is written only by the platform: the request answers 405."
			: undefined,
	]
		.filter(Boolean)
		.join(" ");

	const pathParams = [...r.path.matchAll(/:([A-Za-z_]\w*)/g)].map((m) => m[1]);
	const names = [...(parts.parameters ?? [])];
	// A path parameter the operation does not name already (a future special route) still has to be declared.
	const extra = pathParams
		.filter((p) => !names.includes(p) && !parts.inlineParameters?.some((x) => x.name === p))
		.map((p) => ({ name: p, in: "path", required: true, schema: { type: "string" } }));
	if (!r.public) names.push("token", "xApiKey");
	// Authenticated writes take an Idempotency-Key (services/api/idempotency.ts), uploads included (fingerprinted by their parts).
	const keyed = !r.public && KEYED_METHODS.has(r.method);
	if (keyed) names.push("idempotencyKey");

	const responses: Record<string, Schema> = { ...parts.responses };
	// A JSON body sent as another type answers 415 (lib/body-media.ts).
	// Every route of the table is served through a service call behind the rate limit (services/api.service.ts).
	const errors = [
		...parts.errors,
		...((parts.requestBody?.content as Schema | undefined)?.["application/json"] ? [415] : []),
		...(keyed ? [400, 409, 422] : []),
		...SERVICE_ERRORS,
	];
	for (const code of [...new Set(errors)].sort((a, b) => a - b)) responses[String(code)] = parts.errorOverrides?.[code] ?? ref("responses", ERROR_RESPONSES[code].name);

	const op: Schema = {
		tags: [tagOf(r)],
		summary: r.summary,
		description,
		operationId: r.operationId ?? r.action.replace(/\./g, "_"),
	};
	const params = [...names.map((n) => ref("parameters", n)), ...(parts.inlineParameters ?? []), ...extra];
	if (params.length) op.parameters = params;
	if (parts.requestBody) op.requestBody = parts.requestBody;
	op.responses = responses;
	if (r.public) op.security = parts.security ?? [];
	return op;
}

/**
 * The query parameters the route's operation takes, by name: the ones this document describes, which the gateway
 * accepts (any other answers 400, services/api.service.ts).
 */
export function queryParameterNames(r: RouteDef): string[] {
	const params = (operation(r).parameters ?? []) as Schema[];
	const resolved = params.map((p) => (typeof p.$ref === "string" ? PARAMETERS[p.$ref.split("/").pop()!] : p));
	return [...new Set(resolved.filter((p) => p?.in === "query").map((p) => p.name as string))];
}

// ---------------------------------------------------------------------------------------------------------------
// The document

/** The gateway's own routes outside the catalog: health and metrics, public (issue 13: the document covers them). */
const HEALTH_SCHEMA: Schema = {
	type: "object",
	required: ["status", "info"],
	properties: {
		status: { type: "string", enum: ["ok", "error"], description: "`ok` when every dependency, service and worker is up" },
		info: {
			type: "object",
			description: "One entry per dependency (`document store`, `relational store`, ...), per service (`service:<name>`) and worker",
			additionalProperties: {
				type: "object",
				required: ["status"],
				properties: {
					status: { type: "string", enum: ["up", "down"] },
					kind: { type: "string", description: "What serves it, where the deployment chooses (`document store`: `postgres`)" },
					message: { type: "string" },
				},
			},
		},
	},
};
const OPS_PATHS: Record<string, Record<string, Schema>> = {
	"/status": {
		get: {
			tags: ["ops"],
			summary: "Health of the platform as this gateway sees it",
			operationId: "ops_status",
			security: [],
			responses: {
				"200": { description: "Everything is up", content: json(HEALTH_SCHEMA) },
				"503": { description: "Something is down: `info` says what", content: json(HEALTH_SCHEMA) },
			},
		},
	},
	"/metrics": {
		get: {
			tags: ["ops"],
			summary: "Prometheus metrics of this node (text exposition format 0.0.4)",
			description: "Public unless the deployment sets `METRICS_TOKEN`: then only `Authorization: Bearer <METRICS_TOKEN>` reads them (401 otherwise).",
			operationId: "ops_metrics",
			// Open by default; with METRICS_TOKEN, its bearer (runtime/ops-server.ts metricsAuthorized).
			security: [{}, { metricsToken: [] }],
			responses: {
				"200": { description: "Metrics", content: { "text/plain": { schema: { type: "string" } } } },
				"401": {
					description: "`METRICS_TOKEN` is set and the request does not carry it as its bearer (`WWW-Authenticate: Bearer`)",
					headers: { "WWW-Authenticate": { description: "`Bearer`", schema: { type: "string" } } },
					content: { "application/json": { schema: ref("schemas", "Error"), example: { statusCode: 401, message: "metrics token is required", error: STATUS_NAMES[401] } } },
				},
			},
		},
	},
	"/api-json": {
		get: {
			tags: ["ops"],
			summary: "This OpenAPI document: the whole API",
			operationId: "ops_api_json",
			security: [],
			responses: { "200": { description: "The OpenAPI 3.1 document of every service", content: json({ type: "object", description: "An OpenAPI 3.1 document" }) } },
		},
	},
	"/api-json/{service}": {
		get: {
			tags: ["ops"],
			summary: "The OpenAPI document of one service",
			description: "The paths under `/<service>` and the components they use; the interactive page (`/api`) loads these.",
			operationId: "ops_api_json_service",
			security: [],
			parameters: [{ name: "service", in: "path", required: true, description: "A service's name", schema: { type: "string", enum: DOMAINS.map((d) => d.name) } }],
			responses: {
				"200": { description: "The OpenAPI 3.1 document of the service", content: json({ type: "object", description: "An OpenAPI 3.1 document" }) },
				"404": {
					description: "No service of that name (the message lists them)",
					content: {
						"application/json": {
							schema: ref("schemas", "Error"),
							example: { statusCode: 404, message: "no API document for 'nope' (services: auth, ...; the whole API: /api-json)", error: STATUS_NAMES[404] },
						},
					},
				},
			},
		},
	},
};

function build(): Schema {
	const routes = allRoutes();

	const collections = new Map<string, { d: DomainDef; c: CollectionDef }>();
	for (const r of routes) if (r.domain && r.collection) collections.set(`${r.domain.name}/${r.collection.name}`, { d: r.domain, c: r.collection });
	const refs = new Map([...collections].map(([path, { d, c }]) => [path, schemaName(d, c)]));

	const schemas: Record<string, Schema> = { ...SPEC_SCHEMAS };
	for (const [path, { d, c }] of collections) {
		const name = schemaName(d, c);
		schemas[name] = docSchema(d, c, refs);
		schemas[`${name}Full`] = fullSchema(d, c);
		schemas[`${name}Create`] = createSchema(d, c, refs);
		schemas[`${name}Patch`] = patchSchema(d, c, refs);
		const reveal = REVEALED_ON_CREATE[path];
		if (reveal) schemas[`${name}Created`] = { ...docSchema(d, c, refs, reveal), description: `The ${path} document as the create response returns it.` };
	}

	const paths: Record<string, Record<string, Schema>> = {};
	const tags: Array<{ name: string; description: string }> = [];
	for (const r of routes) {
		const path = r.path.replace(/:([A-Za-z_]\w*)/g, "{$1}");
		(paths[path] ??= {})[r.method.toLowerCase()] = operation(r);
		const tag = tagOf(r);
		if (!tags.some((t) => t.name === tag))
			tags.push({ name: tag, description: r.collection ? r.collection.description : "Tokens: issue, verify, logout, TOTP check, grant evaluation" });
	}
	Object.assign(paths, OPS_PATHS);
	tags.push({ name: "ops", description: "Health, metrics and this document (no token; metrics with `METRICS_TOKEN` when it is set)" });

	return {
		openapi: "3.1.0",
		info: {
			title: "Platform Gateway",
			version: pkg.version,
			description:
				"One uniform REST interface over the platform's domain services. Every collection offers the same 11 operations. " +
				"Send `Authorization: Bearer <token>` (a JWT from POST /auth/token, or a personal token `APT-...`). " +
				"Responses: `{ data }` for one document, `{ items, total }` for lists, `{ total }` for counts; errors are `{ statusCode, message, error }`.",
		},
		tags,
		paths,
		webhooks: {
			change: {
				post: {
					summary: "Change event delivered to a client's CQRS webhook (context/configs key `CQRS`)",
					operationId: "webhook_change",
					requestBody: { required: true, content: json(ref("schemas", "ChangeEvent")) },
					responses: { "200": { description: "Any 2xx acknowledges the event" } },
				},
			},
		},
		components: {
			schemas,
			parameters: PARAMETERS,
			responses: responsesComponent(),
			securitySchemes: {
				bearer: {
					type: "http",
					scheme: "bearer",
					bearerFormat: "JWT or APT",
					description: "A JWT (`eyJ...`) or a personal token (`APT-...`); alternatively the `token` query parameter or the `authorization` cookie.",
				},
				// The same bearer where a header cannot be set (EventSource, links, browsers).
				tokenQuery: { type: "apiKey", in: "query", name: "token", description: "The bearer token as `?token=<token>` (JWT or APT)" },
				tokenCookie: { type: "apiKey", in: "cookie", name: "authorization", description: "The bearer token in the `authorization` cookie (JWT or APT)" },
				// POST /auth/token only: `Authorization: Basic base64(client_id:client_secret)` (RFC 6749 §2.3.1).
				// GET /metrics when the deployment sets METRICS_TOKEN.
				metricsToken: { type: "http", scheme: "bearer", description: "`METRICS_TOKEN`, on GET /metrics when the deployment sets it" },
				clientBasic: {
					type: "http",
					scheme: "basic",
					description: "Client authentication on POST /auth/token: `client_id:client_secret` (each form-urlencoded), in place of `client_secret` in the body",
				},
			},
		},
		security: [{ bearer: [] }, { tokenQuery: [] }, { tokenCookie: [] }],
	};
}

function deepFreeze<T>(v: T): T {
	if (v && typeof v === "object" && !Object.isFrozen(v)) {
		Object.freeze(v);
		for (const x of Object.values(v)) deepFreeze(x);
	}
	return v;
}

// Built once: the catalog and the route table are fixed for the life of the process. Frozen because every caller
// shares it.
let cached: Schema | undefined;

export function openApiDocument(opts: { serverUrl?: string } = {}): object {
	cached ??= deepFreeze(build());
	const { openapi, info, ...rest } = cached;
	return { openapi, info, servers: [{ url: opts.serverUrl ?? "/" }], ...rest };
}
