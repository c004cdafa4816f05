/**
 * The operator's REPL (`npm run repl`, or `moleculer-runner --config moleculer.config.ts --repl`): moleculer-repl
 * with commands to act as a principal, so that `call` goes through the authority layer (scope, grant, enforcement)
 * exactly as a request of that principal would:
 *
 *   as <username|user id|client id> [--client <client id>]   act as this user (of that tenant) or client
 *   whoami                                                    who the calls run as
 *   unas                                                      back to no principal
 *   call content.notes.list '{"query": {"pagination": {"limit": 5}}}'
 *   call content.notes.create '{"body": {"title": "from the console"}}'
 *
 * Without a principal, a call to a collection action answers a clear message instead of the authority layer's
 * "authorization layers were not applied". A principal's token carries its client's scopes and its subjects, like
 * a password or client_credential login, with a session opened for it; the REPL runs on a node that has the
 * identity and domain services. It is a platform of its own: on the DATA_DIR of a running one it exits with
 * `DATA_DIR <path> is in use by pid <n>` (lib/datadir-lock.ts, whose socket is where a console attached to the running
 * platform will connect).
 */
import type { Middleware, ServiceBroker } from "moleculer";
import type { TokenClaims } from "./types";
import { findCollection } from "../catalog";
import { usernameProblem, userSubjectProblem } from "./grant-validation";

interface Principal {
	label: string;
	claims: TokenClaims;
}

const current = new WeakMap<ServiceBroker, Principal>();

const HEX24 = /^[0-9a-f]{24}$/i;

interface ClientInfo {
	id: string;
	scopes: string[];
	domains: string[];
	access_token_ttl?: number;
}

/** The token claims a login of this principal would carry (no narrowing). */
export async function principalClaims(broker: ServiceBroker, who: string, clientId?: string): Promise<Principal> {
	const client = (id: string) => broker.call("domain.clients.authenticate", { id }) as Promise<ClientInfo | null>;
	const session = async (p: { uid?: string; cid: string; domain: string }) =>
		((await broker.call("identity.sessions.open", { ...p, ip: "127.0.0.1", agent: "repl", expiration: new Date(Date.now() + 3600_000).toISOString() })) as { id: string }).id;
	const now = Math.floor(Date.now() / 1000);
	const base = { type: "access", strict: false, tz: "UTC", lang: "en", iat: now, exp: now + 3600 } as const;
	if (HEX24.test(who) && !clientId) {
		const c = await client(who.toLowerCase());
		if (c) {
			const domain = c.domains[0];
			if (!domain) throw new Error(`client ${c.id} has no domain: it cannot get a token`);
			const claims = { ...base, cid: c.id, client_id: c.id, scope: c.scopes.join(" "), domain, subject: `${c.id}@${domain}`, session: await session({ cid: c.id, domain }) };
			return { label: `client ${c.id} (${domain})`, claims: claims as unknown as TokenClaims };
		}
	}
	const identity = broker.getLocalService("identity") as unknown as { collectionStore(c: string): { find(q: object): Promise<Array<Record<string, any>>> } } | undefined;
	if (!identity) throw new Error("the identity service does not run on this node: start the REPL on a node that runs it");
	const query = HEX24.test(who) ? { id: who.toLowerCase(), deleted_at: null } : { username: who.toLowerCase(), deleted_at: null };
	let users = await identity.collectionStore("users").find({ query });
	if (clientId) users = users.filter((u) => Array.isArray(u.clients) && u.clients[0] === clientId);
	if (users.length === 0) throw new Error(`no user or client '${who}'${clientId ? ` in the tenant of client ${clientId}` : ""}`);
	if (users.length > 1)
		throw new Error(`'${who}' is a user of several tenants (clients ${users.map((u) => u.clients?.[0]).join(", ")}): add --client <client id>`);
	const u = users[0];
	if (u.status === "INACTIVE") throw new Error(`user ${u._id ?? u.id} is INACTIVE: it cannot log in`);
	const c = await client(String(clientId ?? u.clients?.[0]));
	if (!c) throw new Error(`the client of user '${who}' is gone or inactive`);
	const domain = c.domains[0];
	const uid = String(u.id ?? u._id);
	const own = ((u.subjects as string[]) ?? []).filter((s, i) => userSubjectProblem(s, `subjects[${i}]`) === null);
	const named = u.username && usernameProblem(u.username) === null ? [`${u.username}@${domain}`] : [];
	const subjects = [...own.map((s) => `${s}@${domain}`), `${uid}@${domain}`, ...named];
	const groups = own.filter((s) => !s.startsWith("@"));
	const claims = {
		...base,
		cid: c.id,
		client_id: c.id,
		uid,
		scope: c.scopes.join(" "),
		domain,
		subject: [...new Set(subjects)].join(" "),
		...(groups.length ? { groups } : {}),
		session: await session({ uid, cid: c.id, domain }),
	};
	return { label: `user ${u.username ?? uid} (${uid}) of client ${c.id} (${domain})`, claims: claims as unknown as TokenClaims };
}

/** True for an action the authority layer guards (a collection's standard or special action). */
function guarded(action: string): boolean {
	const [svc, col] = action.split(".");
	return !!(svc && col && findCollection(svc, col));
}

/**
 * Calls from the REPL (`meta.$repl`) run as the chosen principal: its claims become the call's token. Without one, a
 * guarded action is refused with what to do instead.
 */
export function ReplPrincipalMiddleware(broker: ServiceBroker): Middleware {
	return {
		name: "ReplPrincipal",
		call(next: (action: string, params?: unknown, opts?: any) => Promise<unknown>) {
			return function (action: string, params?: unknown, opts?: any) {
				if (!opts?.meta?.$repl || opts.meta.token) return next(action, params, opts);
				const who = current.get(broker);
				if (!who) {
					if (!guarded(action)) return next(action, params, opts);
					const err = new Error(`${action} goes through the authority layer: act as a principal first (as <username|client id>), then call it again`);
					err.stack = err.message;
					return Promise.reject(err);
				}
				return next(action, params, { ...opts, meta: { ...opts.meta, token: who.claims, tokenKind: "jwt", ip: "127.0.0.1", headers: {} } });
			};
		},
	} as unknown as Middleware;
}

/** The REPL's own commands (moleculer-repl custom commands). */
export function replCommands(): object[] {
	return [
		{
			command: "as <who>",
			description: "Act as a user (username or id) or a client (id): later calls go through the authority layer with its token",
			options: [{ option: "-c, --client <client>", description: "the user's tenant, when the username exists in several" }],
			async action(broker: ServiceBroker, args: { who: string; options: { client?: string } }) {
				try {
					const p = await principalClaims(broker, String(args.who), args.options?.client);
					current.set(broker, p);
					console.log(`>> Calls now run as ${p.label}; scopes: ${p.claims.scope || "(none)"}; subjects: ${p.claims.subject}`);
				} catch (err) {
					console.log(`>> ${(err as Error).message}`);
				}
			},
		},
		{
			command: "whoami",
			description: "Who the calls run as",
			action(broker: ServiceBroker) {
				const p = current.get(broker);
				console.log(p ? `>> ${p.label}` : ">> nobody: collection actions need `as <username|client id>` first");
			},
		},
		{
			command: "unas",
			description: "Stop acting as a principal",
			action(broker: ServiceBroker) {
				current.delete(broker);
				console.log(">> Calls run as nobody again");
			},
		},
	];
}

export function startRepl(platform: { broker: ServiceBroker }): void {
	platform.broker.repl();
}
