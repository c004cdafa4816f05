/**
 * The operators' console (`npm run repl`, or `moleculer-runner --config moleculer.config.ts --repl`): moleculer-repl
 * with commands to act as a principal, so that `call` goes through the authority layer (scope, grant, enforcement)
 * exactly as a request of that principal would:
 *
 *   as <username|user id|client id> [--client <client id>]   act as this user (of that tenant) or client
 *   whoami                                                    who the calls run as
 *   unas                                                      back to no principal
 *   login-blocks [--client <id>] [--user <id>] [--ip <ip>]    the failed-login blocks in force, every tenant's
 *   login-unblock <id>                                        lift one
 *   call content.notes.list '{"query": {"pagination": {"limit": 5}}}'
 *   call content.notes.create '{"body": {"title": "from the console"}}'
 *
 * Without a principal, a call to a collection action answers a clear message instead of the authority layer's
 * "authorization layers were not applied". A principal's token carries its client's scopes and its subjects, like
 * a password or client_credential login, with a session opened for it; `as` asks the `$repl` service, which runs
 * beside the identity service (wherever that is).
 *
 * The console attaches to what runs:
 *  - TRANSPORTER set: it joins the deployment as a node of its own with no service (moleculer.config.ts,
 *    consoleNodeOptions) and its REPL sees and calls the whole cluster;
 *  - else, from a terminal, to the platform holding DATA_DIR, through its socket (runtime/datadir-lock.ts; only the
 *    directory's owner can connect): the commands run in that platform (consoleSessions), one at a time per console,
 *    their output sent back; each console has its own principal. A console that goes away mid-command leaves the
 *    command to finish there, its output dropped. `exit` (or Ctrl-D, Ctrl-C) detaches;
 *  - else it starts the platform with its REPL (start.ts).
 *
 * The wire, one JSON object a line after the lock's greeting: the console sends `{"line"}` (a command),
 * `{"complete"}` (a line to complete) or `{"exec"}` (a scripted command); the platform answers `{"out"}` (output),
 * `{"done"}` (ready for the next), `{"completions", "line"}`, `{"outcome"}` (a scripted command's ExecOutcome, its
 * output inside), `{"bye"}` (detached).
 */
import { AsyncLocalStorage } from "async_hooks";
import { createRequire } from "module";
import type net from "net";
import readline from "readline";
import type { CallingOptions, Middleware, Service, ServiceBroker, ServiceSchema } from "moleculer";
import type { TokenClaims } from "../lib/types";
import { findCollection } from "../catalog";
import { lazy } from "../lib/lazy";
import { usernameProblem, userSubjectProblem } from "../lib/grant-validation";
import { attachConsole, type ConsoleHandler, type ConsoleLink } from "./datadir-lock";
import type { PlatformConfig } from "./config";

interface Principal {
	label: string;
	claims: TokenClaims;
}

/** The principal of the REPL in this process's terminal. */
const current = new WeakMap<ServiceBroker, Principal>();

/** An attached console: its principal, and where what its commands print goes. */
interface ConsoleSession {
	principal?: Principal;
	write(text: string): void;
	/** The command in progress failed (a call rejected, `as` refused, a line commander could not parse): its message. */
	failure?: string;
	/** What the command's last call answered (the result a script reads). */
	result?: unknown;
}

/** Marks the command in progress of the current console session as failed (a script's `--exec` then exits non-zero). */
function failed(message: string): void {
	const s = sessions.getStore();
	if (s) s.failure ??= message;
}

/** What the command in progress answers (the `result` of `--exec`), when it makes its calls itself. */
function answered(value: unknown): void {
	const s = sessions.getStore();
	if (s) s.result = value;
}

/** Runs a command's own call: its answer is the command's result; a failure is printed and fails the command. */
async function own<T>(call: () => Promise<T>, print: (value: T) => void): Promise<void> {
	try {
		const value = await call();
		answered(value);
		print(value);
	} catch (err) {
		const e = err as Error;
		const why = e.name === "ServiceNotFoundError" ? "no node of the auth service answers" : e.message;
		failed(why);
		console.log(`>> ${why}`);
	}
}

/** The console session a command runs for (none: the terminal's REPL, or the platform's own work). */
const sessions = new AsyncLocalStorage<ConsoleSession>();

const principalOf = (broker: ServiceBroker) => {
	const session = sessions.getStore();
	return session ? session.principal : current.get(broker);
};

function actAs(broker: ServiceBroker, p: Principal | undefined): void {
	const session = sessions.getStore();
	if (session) session.principal = p;
	else if (p) current.set(broker, p);
	else current.delete(broker);
}

const HEX24 = /^[0-9a-f]{24}$/i;

interface ClientInfo {
	id: string;
	scopes: string[];
	domains: string[];
	access_token_ttl?: number;
}

/** A user document as the identity store holds it: what a principal's claims are made from. */
interface UserDoc {
	id?: string;
	clients?: string[];
	status?: string;
	username?: string;
	subjects?: unknown;
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
	const identity = broker.getLocalService("identity") as unknown as { collectionStore(c: string): { find(q: object): Promise<UserDoc[]> } } | undefined;
	if (!identity) throw new Error("the identity service does not run on this node: start the REPL on a node that runs it");
	const query = HEX24.test(who) ? { id: who.toLowerCase(), deleted_at: null } : { username: who.toLowerCase(), deleted_at: null };
	let users = await identity.collectionStore("users").find({ query });
	if (clientId) users = users.filter((u) => Array.isArray(u.clients) && u.clients[0] === clientId);
	if (users.length === 0) throw new Error(`no user or client '${who}'${clientId ? ` in the tenant of client ${clientId}` : ""}`);
	if (users.length > 1) throw new Error(`'${who}' is a user of several tenants (clients ${users.map((u) => u.clients?.[0]).join(", ")}): add --client <client id>`);
	const u = users[0];
	if (u.status === "INACTIVE") throw new Error(`user ${u.id} is INACTIVE: it cannot log in`);
	const c = await client(String(clientId ?? u.clients?.[0]));
	if (!c) throw new Error(`the client of user '${who}' is gone or inactive`);
	const domain = c.domains[0];
	const uid = String(u.id);
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

/** Where `as` finds principals: beside the identity service, on whichever node runs it. */
const PRINCIPALS = "$repl";

const principalService = (): ServiceSchema => ({
	name: PRINCIPALS,
	actions: {
		principal: {
			visibility: "public",
			handler(ctx: { params: { who: string; client?: string } }) {
				return principalClaims((this as unknown as Service).broker, String(ctx.params.who), ctx.params.client);
			},
		},
	},
});

/**
 * Calls from the REPL (`meta.$repl`) run as the chosen principal (the attached console's own, else the terminal's):
 * its claims become the call's token. Without one, a guarded action is refused with what to do instead. A call or
 * event from an attached console runs outside its session: what the action logs stays in the platform's log. And the
 * node that runs the identity service also runs `$repl`, where `as` finds principals from any node.
 */
export function ReplPrincipalMiddleware(broker: ServiceBroker): Middleware {
	const outside =
		<A extends unknown[], R>(next: (...args: A) => R) =>
		(...args: A): R =>
			sessions.getStore() ? sessions.exit(() => next(...args)) : next(...args);
	return {
		name: "ReplPrincipal",
		serviceCreated(service: Service) {
			if (service.name === "identity" && !broker.getLocalService(PRINCIPALS)) broker.createService(principalService());
		},
		call(next: (action: string, params?: unknown, opts?: CallingOptions) => Promise<unknown>) {
			const send = outside(next);
			const run = function (action: string, params?: unknown, opts?: CallingOptions) {
				if (!opts?.meta?.$repl || opts.meta.token) return send(action, params, opts);
				const who = principalOf(broker);
				if (!who) {
					if (!guarded(action)) return send(action, params, opts);
					const err = new Error(`${action} goes through the authority layer: act as a principal first (as <username|client id>), then call it again`);
					err.stack = err.message;
					return Promise.reject(err);
				}
				return send(action, params, { ...opts, meta: { ...opts.meta, token: who.claims, tokenKind: "jwt", ip: "127.0.0.1", headers: {} } });
			};
			return function (action: string, params?: unknown, opts?: CallingOptions) {
				const session = opts?.meta?.$repl ? sessions.getStore() : undefined;
				if (!session) return run(action, params, opts);
				// A console's own call: its outcome is the command's (the answer, or the failure `--exec` reports).
				return run(action, params, opts).then(
					(value) => ((session.result = value), value),
					(err: Error) => {
						session.failure ??= err?.message ?? String(err);
						throw err;
					},
				);
			};
		},
		emit: outside,
		broadcast: outside,
		broadcastLocal: outside,
	} as unknown as Middleware;
}

/** The REPL's own commands (moleculer-repl custom commands). */
export function replCommands(): ReplCommand[] {
	return [
		{
			command: "as <who>",
			description: "Act as a user (username or id) or a client (id): later calls go through the authority layer with its token",
			options: [{ option: "-c, --client <client>", description: "the user's tenant, when the username exists in several" }],
			async action(broker: ServiceBroker, args: { who: string; options: { client?: string } }) {
				try {
					const p = (await broker.call(`${PRINCIPALS}.principal`, { who: String(args.who), client: args.options?.client })) as Principal;
					actAs(broker, p);
					console.log(`>> Calls now run as ${p.label}; scopes: ${p.claims.scope || "(none)"}; subjects: ${p.claims.subject}`);
				} catch (err) {
					const e = err as Error;
					const why = e.name === "ServiceNotFoundError" ? "no node of the identity service answers: `as` needs one" : e.message;
					failed(why);
					console.log(`>> ${why}`);
				}
			},
		},
		{
			command: "whoami",
			description: "Who the calls run as",
			action(broker: ServiceBroker) {
				const p = principalOf(broker);
				console.log(p ? `>> ${p.label}` : ">> nobody: collection actions need `as <username|client id>` first");
			},
		},
		{
			command: "unas",
			description: "Stop acting as a principal",
			action(broker: ServiceBroker) {
				actAs(broker, undefined);
				console.log(">> Calls run as nobody again");
			},
		},
		// The console is the operator's: it sees and lifts every tenant's blocks, whoever it acts as.
		{
			command: "login-blocks",
			description: 'List the failed-login blocks in force, every tenant\'s (docs/security.md, "Failed logins")',
			options: [
				{ option: "-c, --client <client>", description: "only those of this client (id)" },
				{ option: "-u, --user <user>", description: "only those of this user (id)" },
				{ option: "-i, --ip <ip>", description: "only those of this IP" },
			],
			action(broker: ServiceBroker, args: { options: Record<string, string | undefined> }) {
				const filter = Object.fromEntries(Object.entries(args.options ?? {}).filter(([, v]) => v !== undefined));
				return own(
					() => broker.call("auth.loginBlocks.all", filter) as Promise<{ items: LoginBlockLine[]; total: number }>,
					(r) => {
						console.log(`>> ${r.total} login block${r.total === 1 ? "" : "s"} in force${r.total > r.items.length ? ` (the newest ${r.items.length} shown)` : ""}`);
						for (const b of r.items) console.log(`   ${b.id}  ${b.failures}/${b.limit} failures, until ${b.until}`);
					},
				);
			},
		},
		{
			command: "login-unblock <id>",
			description: "Lift a failed-login block (its id as login-blocks lists it)",
			action(broker: ServiceBroker, args: { id: string }) {
				return own(
					() => broker.call("auth.loginBlocks.lift", { id: String(args.id) }),
					() => console.log(`>> Lifted ${args.id}: its failures are forgotten`),
				);
			},
		},
	];
}

/** What `login-blocks` prints of a block (services/auth/login-limits.ts LoginBlock). */
interface LoginBlockLine {
	id: string;
	failures: number;
	limit: number;
	until: string;
}

interface ReplCommand {
	command: string;
	description: string;
	options?: Array<{ option: string; description: string }>;
	/** `args`: the command's operands by name, and its options. */
	action(broker: ServiceBroker, args: { options?: Record<string, unknown>; [operand: string]: unknown }): unknown;
}

export function startRepl(platform: { broker: ServiceBroker }): void {
	platform.broker.repl();
}

// ---- The platform's side of an attached console --------------------------------------------------------------

/**
 * moleculer-repl's own modules (its command set, completion, argument splitting), and the commander it builds on:
 * loaded by the first console, so a node no console attaches to never compiles them.
 */
type Program = import("commander").Command;
const repl = lazy(() => {
	const fromRepl = createRequire(require.resolve("moleculer-repl"));
	return {
		Command: (fromRepl("commander") as typeof import("commander")).Command,
		registerReplCommands: fromRepl("./src/commands") as (program: Program, broker: ServiceBroker) => void,
		autocompleteHandler: (fromRepl("./src/autocomplete") as { autocompleteHandler(line: string, broker: ServiceBroker, program: Program): [string[], string] }).autocompleteHandler,
		parseArgsStringToArgv: (fromRepl("string-argv") as { parseArgsStringToArgv(line: string, env?: string, file?: string): string[] }).parseArgsStringToArgv,
	};
});

/** A console that reads nothing while its command prints is cut beyond this much unsent output. */
const MAX_UNSENT = 16 * 1024 * 1024;

/**
 * What the platform prints (console.*, process.stdout/stderr) while it runs a console's command goes to that console,
 * not to the platform's output; everything else is untouched. Installed once, at the first console.
 */
let capturing = false;
function captureOutput(): void {
	if (capturing) return;
	capturing = true;
	for (const stream of [process.stdout, process.stderr]) {
		const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
		stream.write = function (chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
			const session = sessions.getStore();
			if (!session) return write(chunk, encoding, cb);
			session.write(typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8"));
			const done = typeof encoding === "function" ? encoding : cb;
			if (typeof done === "function") process.nextTick(done as () => void);
			return true;
		} as typeof stream.write;
	}
}

/**
 * moleculer-repl's command set for one console (commander keeps state per program): its commands, the project's
 * (`as`, `whoami`, `unas`), and `exit` detaching the console instead of stopping the platform. Commander never exits
 * the process here: its errors and help are thrown (exitOverride) once printed.
 */
function consoleProgram(broker: ServiceBroker, detach: () => void): Program {
	const { Command, registerReplCommands } = repl();
	const program = new Command();
	program.exitOverride().allowUnknownOption(true).showHelpAfterError(true).showSuggestionAfterError(true);
	registerReplCommands(program, broker);
	// moleculer-repl's `exit` stops the broker and the process: the platform's, here.
	const exit = program.commands.findIndex((c) => c.name() === "exit");
	if (exit >= 0) program.commands.splice(exit, 1);
	program.command("exit").alias("q").alias("quit").description("Detach this console (the platform keeps running)").action(detach);
	for (const def of replCommands()) {
		const cmd = program.command(def.command).description(def.description);
		for (const o of def.options ?? []) cmd.option(o.option, o.description);
		cmd.action(async function (this: Program) {
			const operands = Object.fromEntries((this as unknown as { _args: Array<{ name(): string }> })._args.map((a, i) => [a.name(), this.args[i]]));
			const options = { ...this.opts() };
			// Commander keeps option values from one parse to the next (moleculer-repl clears them the same way).
			(this as unknown as { _optionValues: object })._optionValues = {};
			await def.action(broker, { ...operands, options });
		});
	}
	return program;
}

/** Runs one command line as moleculer-repl's evaluator does; its errors are printed, never thrown. */
async function evaluate(program: Program, line: string): Promise<void> {
	const argv = repl().parseArgsStringToArgv(line, "node", "Moleculer REPL");
	if (argv.length === 2) return;
	try {
		await program.parseAsync(argv);
	} catch (err) {
		// Commander's own (unknown command, missing argument, help shown) are printed already.
		const e = err as { code?: string; message?: string };
		if (e?.code !== "commander.helpDisplayed" && e?.code !== "commander.help") failed(String(e?.message ?? e));
		if (!String(e?.code).startsWith("commander.")) console.error(`>> ${e?.message ?? e}`);
	}
}

/** What one scripted command (`--exec`) answers: JSON, one object a command. */
export interface ExecOutcome {
	command: string;
	ok: boolean;
	/** The last call's answer, when the command made one. */
	result?: unknown;
	error?: string;
	/** What the command printed, without colours. */
	output: string;
}

const ANSI = /\x1b\[[0-9;]*m/g;

/** Runs one command line in `session` and reports its outcome (the session keeps its principal for the next). */
async function execute(program: Program, session: ConsoleSession & { printed: string }, line: string): Promise<ExecOutcome> {
	session.failure = undefined;
	session.result = undefined;
	session.printed = "";
	await sessions.run(session, () => evaluate(program, line));
	// Set by the command's calls (TypeScript cannot see them through the call above).
	const failure = session.failure as string | undefined;
	const outcome: ExecOutcome = { command: line, ok: failure === undefined, output: session.printed.replace(ANSI, "") };
	if (session.result !== undefined) outcome.result = session.result;
	if (failure !== undefined) outcome.error = failure.replace(ANSI, "");
	return outcome;
}

/**
 * Scripted commands in this process (a console node of the deployment, `TRANSPORTER` set): each line in turn, one
 * principal for all of them, stopping at the first that fails.
 */
export async function execHere(broker: ServiceBroker, lines: string[]): Promise<ExecOutcome[]> {
	captureOutput();
	const session = { printed: "", write: (out: string) => void (session.printed += out) } as ConsoleSession & { printed: string };
	const program = consoleProgram(broker, () => undefined);
	const out: ExecOutcome[] = [];
	for (const line of lines) {
		const o = await execute(program, session, line);
		out.push(o);
		if (!o.ok) break;
	}
	return out;
}

/** Calls `onMessage` with each JSON line `conn` sends (after `rest`), `onClose` once it is gone; a bad line is skipped. */
function jsonLines(conn: net.Socket, rest: Buffer, onMessage: (msg: Record<string, unknown>) => void, onClose: () => void, max = MAX_UNSENT): void {
	let text = "";
	const take = (chunk: Buffer | string) => {
		text += chunk.toString();
		for (let eol = text.indexOf("\n"); eol >= 0; eol = text.indexOf("\n")) {
			const line = text.slice(0, eol);
			text = text.slice(eol + 1);
			try {
				const msg = JSON.parse(line);
				if (msg && typeof msg === "object") onMessage(msg);
			} catch {
				/* not a message */
			}
		}
		if (text.length > max) conn.destroy();
	};
	conn.on("data", take);
	conn.once("close", onClose);
	conn.on("error", () => undefined);
	take(rest);
	conn.resume();
}

const sendOn = (conn: net.Socket) => (msg: object) => {
	if (!conn.writable) return;
	conn.write(`${JSON.stringify(msg)}\n`);
	if (conn.writableLength > MAX_UNSENT) conn.destroy();
};

/**
 * The platform's side of attached consoles (runtime/datadir-lock.ts hands each one over): each console's lines run one at
 * a time, with moleculer-repl's commands and the project's, as that console (its own principal), what they print
 * sent to it. A console that goes away mid-command changes nothing here: the command finishes, its output is dropped.
 */
export function consoleSessions(broker: ServiceBroker): ConsoleHandler {
	captureOutput();
	return (conn, rest) => {
		const send = sendOn(conn);
		// While a scripted command (`exec`) runs, what it prints is kept for its answer instead of streamed.
		let scripted = false;
		const session = { printed: "", write: (out: string) => (scripted ? void (session.printed += out) : send({ out })) } as ConsoleSession & { printed: string };
		const program = consoleProgram(broker, () => {
			send({ bye: true });
			conn.end();
		});
		let queue = Promise.resolve();
		jsonLines(
			conn,
			rest,
			(msg) => {
				queue = queue
					.then(async () => {
						if (conn.destroyed) return;
						if (typeof msg.complete === "string") {
							return send({ completions: repl().autocompleteHandler(msg.complete, broker, program)[0], line: msg.complete });
						}
						if (typeof msg.exec === "string") {
							scripted = true;
							try {
								return send({ outcome: await execute(program, session, msg.exec) });
							} finally {
								scripted = false;
							}
						}
						if (typeof msg.line !== "string") return;
						await sessions.run(session, () => evaluate(program, msg.line as string));
						send({ done: true });
					})
					.catch(() => undefined);
			},
			() => undefined,
			1024 * 1024,
		);
	};
}

// ---- The console's side: a terminal attached through the socket -----------------------------------------------------

/**
 * `npm run repl` (and the runner's `--repl`) from a terminal, without TRANSPORTER: the console of the platform holding
 * DATA_DIR. Resolves with the exit status once detached; `undefined` when no platform holds DATA_DIR (then the caller
 * starts one with its REPL).
 */
export async function attachToDataDir(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl">): Promise<number | undefined> {
	const link = await attachConsole(cfg);
	if (!link) return undefined;
	if ("refused" in link) {
		console.error(link.refused);
		return 1;
	}
	return terminal(link, `>> Attached to the platform on DATA_DIR ${cfg.dataDir} (pid ${link.pid ?? "unknown"}): its commands, as \`help\` lists; \`exit\` or Ctrl-D detaches`);
}

/**
 * `npm run repl -- --exec '<command>' [--exec '<command>' ...]`: the commands run in turn, as one console, in the
 * platform on DATA_DIR (or, with TRANSPORTER, in a console node of the deployment: the caller runs execHere). Each
 * prints one JSON line (ExecOutcome); the first that fails ends the run. Resolves with the exit status: 0 when every
 * command succeeded, 1 when one failed, 2 when no platform holds DATA_DIR or it refused the console.
 */
export async function execOnDataDir(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl">, lines: string[]): Promise<number> {
	// A script may run right after `npm start`: a platform still starting is waited for (EXEC_START_WAIT_MS).
	let link = await attachConsole(cfg);
	for (const end = Date.now() + EXEC_START_WAIT_MS; link && "refused" in link && /still starting/.test(link.refused) && Date.now() < end;) {
		await new Promise((r) => setTimeout(r, 250));
		link = await attachConsole(cfg);
	}
	if (!link || "refused" in link) {
		console.error(link ? link.refused : `no platform runs on DATA_DIR ${cfg.dataDir}: start it (npm start), then run the commands again`);
		return 2;
	}
	const { conn } = link;
	const send = sendOn(conn);
	return new Promise((resolve) => {
		let next = 0;
		let status: number | undefined;
		const finish = (code: number) => {
			if (status !== undefined) return;
			status = code;
			conn.end();
			resolve(code);
		};
		const ask = () => (next < lines.length ? send({ exec: lines[next++] }) : finish(0));
		jsonLines(
			conn,
			link.rest,
			(msg) => {
				const o = msg.outcome as ExecOutcome | undefined;
				if (!o) return;
				process.stdout.write(`${JSON.stringify(o)}\n`);
				if (o.ok) ask();
				else finish(1);
			},
			() => {
				if (status === undefined) console.error(">> The platform closed the console (it stopped?)");
				finish(1);
			},
		);
		ask();
	});
}

/** How long `--exec` waits for a platform that is still starting on DATA_DIR. */
const EXEC_START_WAIT_MS = 60_000;

/** The `--exec` commands of argv, in order (`--exec <command>` or `--exec=<command>`). */
export function execArgs(argv: string[]): string[] {
	const out: string[] = [];
	for (let i = 0; i < argv.length; i++) {
		if (argv[i] === "--exec" && i + 1 < argv.length) out.push(argv[++i]);
		else if (argv[i].startsWith("--exec=")) out.push(argv[i].slice("--exec=".length));
	}
	return out;
}

/** Reads commands from this terminal, sends them to the platform, prints what comes back. */
function terminal(link: ConsoleLink, banner: string): Promise<number> {
	const { conn } = link;
	const send = sendOn(conn);
	return new Promise((resolve) => {
		let completing: ((err: null, result: [string[], string]) => void) | undefined;
		let detached = false;
		const rl = readline.createInterface({
			input: process.stdin,
			output: process.stdout,
			prompt: "mol $ ",
			historySize: 1000,
			completer: (line: string, cb: (err: null, result: [string[], string]) => void) => {
				completing = cb;
				send({ complete: line });
			},
		});
		const finish = (status: number, why = ">> Detached: the platform keeps running") => {
			if (detached) return;
			detached = true;
			(status ? console.error : console.log)(why);
			rl.close();
			conn.end();
			resolve(status);
		};
		jsonLines(
			conn,
			link.rest,
			(msg) => {
				if (typeof msg.out === "string") process.stdout.write(msg.out);
				else if (msg.done === true) rl.prompt();
				else if (Array.isArray(msg.completions)) {
					completing?.(null, [msg.completions as string[], String(msg.line ?? "")]);
					completing = undefined;
				} else if (msg.bye === true) finish(0);
			},
			() => finish(1, ">> The platform closed the console (it stopped?)"),
		);
		rl.on("line", (line) => (line.trim() ? send({ line }) : rl.prompt()));
		// Ctrl-D and Ctrl-C detach; a command in progress finishes in the platform.
		rl.on("close", () => finish(0));
		rl.on("SIGINT", () => finish(0));
		console.log(banner);
		rl.prompt();
	});
}
