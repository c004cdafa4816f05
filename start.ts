/** `npm start`: the whole platform in one process on PORT with the embedded stores (or a SERVICES subset). */
import { startPlatform, type Platform } from "./platform";
import { startRepl } from "./lib/repl";
import { StartupError } from "./lib/config";

async function main() {
	let platform: Platform | undefined;
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
			await platform?.stop();
			process.exit(0);
		} catch (err) {
			console.error("stop failed:", err);
			process.exit(1);
		}
	};
	process.on("SIGINT", stop);
	process.on("SIGTERM", stop);
	process.on("SIGHUP", stop);
	platform = await startPlatform();
	if (stopping) return; // a signal came during the start: stop() waits for nothing more
	if (platform.url) platform.broker.logger.info(`Platform gateway listening on ${platform.url} (docs: ${platform.url}/api)`);
	if (process.argv.includes("--repl")) startRepl(platform);
}

main().catch((err) => {
	console.error(err instanceof StartupError ? `cannot start: ${err.message}` : err);
	process.exit(1);
});
