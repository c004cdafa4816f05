/**
 * The HTTP surface derived from the catalog: one table that the gateway mounts and the OpenAPI document
 * describes, so the two cannot drift apart.
 */
import { DOMAINS, STANDARD_OPS, specialName, type CollectionDef, type DomainDef, type SpecialDef, type StandardOp } from "../catalog";

export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

export interface RouteDef {
	method: Method;
	/** Express-style path, e.g. `/identity/users/:id`. */
	path: string;
	/** Moleculer action, e.g. `identity.users.get`. */
	action: string;
	/** Scope needed, e.g. `read:identity:users`; undefined for public or token-only routes. */
	scope?: string;
	public?: boolean;
	op?: StandardOp;
	domain?: DomainDef;
	collection?: CollectionDef;
	summary: string;
	/** The SSE cursor is produced on the gateway node itself. */
	stream?: boolean;
	/** A special action of the collection (catalog `specials`). */
	special?: SpecialDef;
	/** A multipart special: the gateway streams each file part to the action (services/api/files.ts). */
	upload?: boolean;
	/** The public file download, served by the gateway from the special domain's stream (services/api/files.ts). */
	download?: boolean;
	/** The OpenAPI operationId when the action's own (`auth.logout` → `auth_logout`) names another route already. */
	operationId?: string;
}

/** Order matters: fixed segments (`count`, `cursor`, `bulk`) before `:id`. */
const PATTERN: Array<{ op: StandardOp; method: Method; suffix: string; summary: string }> = [
	{ op: "count", method: "GET", suffix: "/count", summary: "Count documents" },
	{ op: "cursor", method: "GET", suffix: "/cursor", summary: "Stream documents as server-sent events" },
	{ op: "bulkCreate", method: "POST", suffix: "/bulk", summary: "Create many documents" },
	{ op: "bulkPatch", method: "PATCH", suffix: "/bulk", summary: "Update every document matching the query" },
	{ op: "create", method: "POST", suffix: "", summary: "Create a document" },
	{ op: "list", method: "GET", suffix: "", summary: "List documents" },
	{ op: "restore", method: "PUT", suffix: "/:id/restore", summary: "Restore a soft-deleted document" },
	{ op: "destroy", method: "DELETE", suffix: "/:id/destroy", summary: "Remove a document permanently" },
	{ op: "get", method: "GET", suffix: "/:id", summary: "Get a document" },
	{ op: "patch", method: "PATCH", suffix: "/:id", summary: "Update fields of a document" },
	{ op: "remove", method: "DELETE", suffix: "/:id", summary: "Soft-delete a document" },
];

/** Endpoints of the `/auth` root (spec: Authentication endpoints). */
export const AUTH_ROUTES: RouteDef[] = [
	{ method: "POST", path: "/auth/token", action: "auth.token", public: true, summary: "Issue tokens (password, refresh_token, client_credential, authorization_code)" },
	{ method: "GET", path: "/auth/verify", action: "auth.verify", summary: "Claims of the bearer token" },
	{ method: "GET", path: "/auth/logout", action: "auth.logout", summary: "End the token's session" },
	{ method: "POST", path: "/auth/logout", action: "auth.logout", operationId: "auth_logout_post", summary: "End the token's session (as GET)" },
	{ method: "POST", path: "/auth/check", action: "auth.check", summary: "Check a TOTP code" },
	{ method: "POST", path: "/auth/can", action: "auth.can", summary: "Evaluate grants for an action on an object" },
	{
		method: "GET",
		path: "/auth/login-blocks",
		action: "auth.loginBlocks",
		scope: "manage:identity:users",
		summary: "Failed-login blocks in force (operator: all; tenant admin: its own)",
	},
	{ method: "DELETE", path: "/auth/login-blocks/:id", action: "auth.loginUnblock", scope: "manage:identity:users", summary: "Lift a failed-login block" },
];

/**
 * The collection's built special actions (catalog `implemented`), mounted before the pattern so a fixed segment
 * (`/start`, `/search`) never falls through to `GET /:id`. Action `<service>.<collection>.<name>`, scope
 * `<action>:<service>:<collection>`.
 */
export function specialRoutes(d: DomainDef, c: CollectionDef): RouteDef[] {
	const base = `/${d.name}/${c.name}`;
	return (c.specials ?? [])
		.filter((s) => s.implemented)
		.map((s) => ({
			method: s.method,
			path: `${base}/${s.path}`,
			action: `${d.name}.${c.name}.${specialName(s)}`,
			scope: `${s.action}:${d.name}:${c.name}`,
			domain: d,
			collection: c,
			summary: s.description,
			special: s,
			...(s.multipart ? { upload: true } : {}),
		}));
}

export function collectionRoutes(d: DomainDef, c: CollectionDef): RouteDef[] {
	const base = `/${d.name}/${c.name}`;
	return [
		...specialRoutes(d, c),
		...PATTERN.map((p) => ({
			method: p.method,
			path: base + p.suffix,
			action: `${d.name}.${c.name}.${p.op}`,
			scope: `${STANDARD_OPS[p.op]}:${d.name}:${c.name}`,
			op: p.op,
			domain: d,
			collection: c,
			summary: p.summary,
			stream: p.op === "cursor",
		})),
	];
}

/** Public routes of collections (no scope: the handler decides, and answers 404 for anything it refuses). */
export function publicCollectionRoutes(): RouteDef[] {
	const d = DOMAINS.find((x) => x.name === "special")!;
	const c = d.collections.find((x) => x.name === "files")!;
	return [
		{
			method: "GET",
			path: "/special/files/:id/download",
			action: "special.files.download",
			public: true,
			download: true,
			domain: d,
			collection: c,
			summary: "Download a file's content (share key or bearer)",
		},
	];
}

/** Special actions that only read (routed by GET): every other special action changes state, whatever its method. */
const READING_SPECIALS = new Set(["search", "read"]);

/**
 * Whether a request of the route changes state (the cross-site rule, docs/security.md "Cross-site requests"): every
 * method but GET and HEAD, `GET /auth/logout`, and the special actions routed by GET that act (saga commit and abort,
 * transaction verify and abort).
 */
export function changesState(r: Pick<RouteDef, "method" | "path" | "special">): boolean {
	return r.method !== "GET" || r.path === "/auth/logout" || (r.special !== undefined && !READING_SPECIALS.has(r.special.action));
}

export function allRoutes(): RouteDef[] {
	return [...AUTH_ROUTES, ...DOMAINS.flatMap((d) => d.collections.flatMap((c) => collectionRoutes(d, c))), ...publicCollectionRoutes()];
}
