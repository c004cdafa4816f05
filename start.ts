/**
 * `npm start`: the whole platform in one process on PORT with the embedded stores (or a SERVICES subset).
 * `--repl` (`npm run repl`): the operators' console, attached to what runs (runtime/repl.ts): with TRANSPORTER a console
 * node of the deployment; else, from a terminal, the platform holding DATA_DIR; else the platform, started here with
 * its REPL.
 */
import type { ServiceBroker } from "moleculer";
import type { Platform } from "./platform";
import { readConfig, StartupError } from "./runtime/config";
import { DataDirInUse, lockDataDir, type DataDirLock } from "./runtime/datadir-lock";

/** Signals this close to the first one are the same request to stop (one Ctrl-C reaches node twice under npm). */
const SAME_REQUEST_MS = 1000;

async function main() {
	let platform: Platform | undefined;
	let lock: DataDirLock | undefined;
	let consoleNode: ServiceBroker | undefined;
	let stopping = false;
	let stopAsked = 0;
	// SIGINT (Ctrl-C) and SIGTERM (docker stop, systemd, kill) stop the platform in order (platform.stop logs each
	// step) and exit 0; a second signal while stopping exits at once, unless it comes within SAME_REQUEST_MS of the
	// first: Ctrl-C in a terminal sends SIGINT to the whole process group and npm forwards its own copy to node, so one
	// keystroke arrives twice. `npm start` execs node, so npm's signals reach it.
	const stop = async (signal: NodeJS.Signals) => {
		if (stopping) {
			if (Date.now() - stopAsked < SAME_REQUEST_MS) return;
			console.error(`${signal} again while stopping: exiting now`);
			process.exit(1);
		}
		stopping = true;
		stopAsked = Date.now();
		const log = platform?.broker.getLogger("platform");
		if (log) log.info(`${signal} received: stopping`);
		else console.error(`${signal} received: stopping`);
		try {
			await (platform ? platform.stop() : consoleNode ? consoleNode.stop() : lock?.release());
			process.exit(0);
		} catch (err) {
			console.error("stop failed:", err);
			process.exit(1);
		}
	};
	process.on("SIGINT", stop);
	process.on("SIGTERM", stop);
	process.on("SIGHUP", stop);
	const cfg = readConfig();
	const repl = process.argv.includes("--repl");
	const { execArgs } = await import("./runtime/repl");
	const scripted = repl ? execArgs(process.argv.slice(2)) : [];
	if (scripted.length) {
		// `npm run repl -- --exec '<command>'`: the commands, JSON answers, an exit status; never a platform started here.
		if (!cfg.transporter) process.exit(await (await import("./runtime/repl")).execOnDataDir(cfg, scripted));
		const [{ ServiceBroker }, { consoleNodeOptions }, { execHere }] = await Promise.all([import("moleculer"), import("./moleculer.config"), import("./runtime/repl")]);
		consoleNode = new ServiceBroker({ ...consoleNodeOptions(cfg), skipProcessEventRegistration: true, logLevel: "warn" });
		await consoleNode.start();
		const outcomes = await execHere(consoleNode, scripted);
		for (const o of outcomes) process.stdout.write(`${JSON.stringify(o)}\n`);
		await consoleNode.stop();
		process.exit(outcomes.every((o) => o.ok) ? 0 : 1);
	}
	if (repl && cfg.transporter) {
		const [{ ServiceBroker }, { consoleNodeOptions }] = await Promise.all([import("moleculer"), import("./moleculer.config")]);
		consoleNode = new ServiceBroker({ ...consoleNodeOptions(cfg), skipProcessEventRegistration: true });
		await consoleNode.start();
		if (!stopping) consoleNode.repl();
		return;
	}
	// From a terminal, the console of the platform holding DATA_DIR; not from one (a script, a supervisor), `npm run
	// repl` on a DATA_DIR in use is refused below as before.
	if (repl && process.stdin.isTTY) {
		const status = await (await import("./runtime/repl")).attachToDataDir(cfg);
		if (status !== undefined) process.exit(status);
	}
	// DATA_DIR first, before the platform is even loaded: a second `npm start` or `npm run repl` on a data directory in
	// use exits at once, having touched nothing (runtime/datadir-lock.ts).
	lock = await lockDataDir(cfg);
	if (stopping) return;
	const { startPlatform } = await import("./platform");
	platform = await startPlatform({}, lock);
	if (stopping) return; // a signal came during the start: stop() waits for nothing more
	if (platform.url) platform.broker.logger.info(`Platform gateway listening on ${platform.url} (docs: ${platform.url}/api)`);
	const { consoleSessions, startRepl } = await import("./runtime/repl");
	// The operators' consoles attach through the DATA_DIR socket (npm run repl from a terminal).
	lock?.serveConsoles(consoleSessions(platform.broker));
	if (repl) startRepl(platform);
}

main().catch((err) => {
	const said = err instanceof DataDirInUse ? err.message : err instanceof StartupError ? `cannot start: ${err.message}` : err;
	// With LOG_FORMAT=json the last line is JSON too (a shipper reads every line as one object).
	if (process.env.LOG_FORMAT === "json")
		console.error(JSON.stringify({ ts: Date.now(), level: "fatal", msg: typeof said === "string" ? said : String((said as Error)?.stack ?? said) }));
	else console.error(said);
	process.exit(1);
});
