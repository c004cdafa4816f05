/**
 * Two tenants set up the way an operator would (docs/contracts.md "Tenants"), for the suites that attack a capability from
 * one tenant against the other: each tenant is a client with its own domain, a tenant admin holding `manage` on every
 * service (and every special action), and ordinary users `member` (role `@editor`, group `team-x.example`, same names in both
 * tenants) and `limited` (no grant of its own: a suite gives it the field- and row-limited grant it needs).
 */
import { DOMAINS } from "../../catalog";
import { bootPlatform, type HttpResult, type TestPlatform } from "./platform";
import type { PlatformConfig } from "../../runtime/config";

export type Doc = Record<string, any>;

export interface TenantUser {
	id: string;
	username: string;
	password: string;
	token: string;
	/** The grant subject naming this user: `<id>@<domain>`. */
	subject: string;
}

export interface Tenant {
	name: string;
	domain: string;
	client: { id: string; secret: string };
	/** A client-credential token of the tenant's client. */
	clientToken: string;
	admin: TenantUser;
	member: TenantUser;
	limited: TenantUser;
}

export interface Tenancy {
	p: TestPlatform;
	/** The operator's (root's) access token. */
	root: string;
	a: Tenant;
	b: Tenant;
	as(token: string, method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpResult>;
	grant(by: string, body: { subject: string; action: string; object: string } & Doc): Promise<Doc>;
	login(t: Tenant, username: string, password: string): Promise<string>;
	cleanup(): Promise<void>;
}

/** The body of `r` when its status is `status`, else an error that shows what came back. */
export async function ok(r: Promise<HttpResult> | HttpResult, what: string, status = 200): Promise<any> {
	const res = await r;
	if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${res.text.slice(0, 300)}`);
	return res.body;
}

/** Boots a platform (bootPlatform: a database of its own) and sets up tenants `a` and `b`. */
export async function bootTenancy(overrides: Partial<PlatformConfig> = {}): Promise<Tenancy> {
	const p = await bootPlatform(overrides);
	const root = await p.rootToken();
	const as = (token: string, method: string, path: string, body?: unknown, headers?: Record<string, string>) => p.http(method, path, { token, body, headers });
	const grant = async (by: string, body: { subject: string; action: string; object: string } & Doc) =>
		(await ok(as(by, "POST", "/auth/grants", body), `grant ${body.action} ${body.object} to ${body.subject}`)).data;
	// Many at once: one bulk create (the same checks per grant as one by one).
	const grants = async (by: string, items: Array<{ subject: string; action: string; object: string }>) =>
		void (await ok(as(by, "POST", "/auth/grants/bulk", { items }), `${items.length} grants`));
	const login = async (t: Tenant, username: string, password: string) =>
		(await ok(p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.client.id, username, password } }), `login ${username}`)).data.access_token as string;

	async function tenant(name: string): Promise<Tenant> {
		const domain = `${name}.example`;
		const c = (await ok(as(root, "POST", "/domain/clients", { name: `tenant ${name}`, domains: [domain], scopes: ["whole"] }), "client")).data;
		const client = { id: c.id as string, secret: c.secret as string };
		await grant(root, { subject: `${client.id}@${domain}`, action: "manage", object: "identity:users" });
		const clientToken = (await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: client.id, client_secret: client.secret } }), "cc token"))
			.data.access_token as string;
		const t = { name, domain, client, clientToken } as Tenant;
		const user = async (username: string, subjects: string[]): Promise<TenantUser> => {
			const password = `pw-${username}-${name}-Secret1`;
			const doc = (await ok(as(clientToken, "POST", "/identity/users", { username, password, subjects }), `user ${username}`)).data;
			return { id: doc.id, username, password, token: "", subject: `${doc.id}@${domain}` };
		};
		t.admin = await user(`admin-${name}`, ["@admin"]);
		t.member = await user("member", ["@editor", "team-x.example"]);
		t.limited = await user("limited", ["team-y.example"]);
		await grants(root, [
			...DOMAINS.map((d) => ({ subject: t.admin.subject, action: "manage", object: `${d.name}:*` })),
			...DOMAINS.flatMap((d) => d.collections.flatMap((col) => (col.specials ?? []).map((s) => ({ subject: t.admin.subject, action: s.action, object: `${d.name}:${col.name}` })))),
		]);
		for (const u of [t.admin, t.member, t.limited]) u.token = await login(t, u.username, u.password);
		// The tenant admin grants its own role within its own domain.
		await grants(
			t.admin.token,
			DOMAINS.map((d) => ({ subject: `@editor@${domain}`, action: "manage", object: `${d.name}:*` })),
		);
		return t;
	}

	const a = await tenant("a");
	const b = await tenant("b");
	return { p, root, a, b, as, grant, login, cleanup: () => p.cleanup() };
}
