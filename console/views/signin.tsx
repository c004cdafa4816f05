/**
 * Sign-in: the password grant through the client the user belongs to (the root client by default), then the TOTP
 * step when the user's document holds a sealed TOTP secret (`props.totp`, docs/console.md): the code is checked by
 * POST /auth/check, and the console opens only on `OK`. Cancelling the step, or a refused code, ends the session.
 */
import { useState } from "preact/hooks";
import { api, signIn, signOut, signOutReason } from "../api";
import { ErrorBox, Field, Notice, useAction } from "../ui";

export function SignIn(props: { rootClient: string; onDone: () => void }) {
	const fromAddress = new URLSearchParams(location.search).get("client_id");
	const [clientId, setClientId] = useState(fromAddress ?? props.rootClient);
	const [username, setUsername] = useState("");
	const [password, setPassword] = useState("");
	const [totp, setTotp] = useState<string | undefined>(undefined);
	const [code, setCode] = useState("");
	const [busy, error, run, setError] = useAction();

	const submit = (e: Event) => {
		e.preventDefault();
		void run(async () => {
			const claims = await signIn(clientId.trim(), username.trim(), password);
			setPassword("");
			const secret = claims.uid ? await totpSecretOf(claims.uid) : undefined;
			if (secret) setTotp(secret);
			else props.onDone();
		});
	};

	const check = (e: Event) => {
		e.preventDefault();
		void run(async () => {
			const r = await api<{ result: string }>("POST", "/auth/check", { body: { secret: totp, token: code.trim() } });
			if (r.data.result === "OK") return props.onDone();
			setCode("");
			throw new Error("the code is not valid: enter the current code of your authenticator");
		});
	};

	if (totp)
		return (
			<main class="signin" id="main">
				<h1>Two-step sign-in</h1>
				<form onSubmit={check} aria-label="TOTP code">
					<Field label="Code from your authenticator" name="code" value={code} onInput={setCode} inputMode="numeric" autoComplete="one-time-code" required />
					<ErrorBox error={error} />
					<div class="row">
						<button type="submit" disabled={busy}>
							Verify
						</button>
						<button
							type="button"
							class="secondary"
							onClick={() => {
								setTotp(undefined);
								setError(undefined);
								void signOut();
							}}
						>
							Cancel
						</button>
					</div>
				</form>
			</main>
		);

	return (
		<main class="signin" id="main">
			<h1>Platform console</h1>
			{signOutReason && <Notice>{signOutReason}</Notice>}
			<form onSubmit={submit} aria-label="Sign in">
				<Field label="Username" name="username" value={username} onInput={setUsername} autoComplete="username" required />
				<Field label="Password" name="password" type="password" value={password} onInput={setPassword} autoComplete="current-password" required />
				<Field
					label="Client id"
					name="client_id"
					value={clientId}
					onInput={setClientId}
					hint="The root client by default; a tenant's users sign in through their tenant's client."
					required
				/>
				<ErrorBox error={error} />
				<button type="submit" disabled={busy}>
					Sign in
				</button>
			</form>
		</main>
	);
}

/** The user's sealed TOTP secret, when their document holds one and they may read it. */
async function totpSecretOf(uid: string): Promise<string | undefined> {
	try {
		// A user document is usually its client's (the tenant created it): the client zone finds it.
		const doc = (await api<{ data: { props?: { totp?: unknown } } }>("GET", `/identity/users/${uid}`, { query: { zone: "own,share,client" } })).data.data;
		return typeof doc.props?.totp === "string" && doc.props.totp ? doc.props.totp : undefined;
	} catch {
		return undefined;
	}
}
