/** `npm start`: the whole platform in one process on PORT with the embedded stores (or a SERVICES subset). */
import { startPlatform } from "./platform";

async function main() {
	const platform = await startPlatform();
	if (platform.url) platform.broker.logger.info(`Platform gateway listening on ${platform.url} (docs: ${platform.url}/api)`);
	if (process.argv.includes("--repl")) platform.broker.repl();
	const stop = async () => {
		await platform.stop();
		process.exit(0);
	};
	process.once("SIGINT", stop);
	process.once("SIGTERM", stop);
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
