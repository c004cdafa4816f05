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

async function main() {
	let platform: Platform | undefined;
	let lock: DataDirLock | undefined;
	let consoleNode: ServiceBroker | undefined;
	let stopping = false;
	// SIGINT (Ctrl-C) and SIGTERM (docker stop, systemd, kill) stop the platform in order (platform.stop logs each
	// step); a second signal while stopping exits at once. `npm start` execs node, so npm's signals reach it.
	const stop = async (signal: NodeJS.Signals) => {
		if (stopping) {
			console.error(`${signal} again while stopping: exiting now`);
			process.exit(1);
		}
		stopping = true;
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
	console.error(err instanceof DataDirInUse ? err.message : err instanceof StartupError ? `cannot start: ${err.message}` : err);
	process.exit(1);
});
