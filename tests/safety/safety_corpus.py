"""The scrub corpus: true positives (every credential shape and PII class, in prose, JSON, URLs, code blocks, split
across lines) and true negatives that must come back untouched. Grow it with every miss found."""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.safety import REDACTED, REDACTED_PRIVATE_KEY, pii_replacement


@dataclass(frozen=True)
class Case:
    """``text`` holds each of ``secrets`` once; scrubbed, each becomes ``label`` and nothing else changes."""

    name: str
    text: str
    secrets: tuple[str, ...] = ()
    label: str = REDACTED

    def expected(self) -> str:
        out = self.text
        for secret in self.secrets:
            assert out.count(secret) == 1, (self.name, secret)
            out = out.replace(secret, self.label)
        return out

    def spans(self) -> list[tuple[int, int]]:
        return [(self.text.index(s), self.text.index(s) + len(s)) for s in self.secrets]


def pii(name: str, text: str, *secrets: str, cls: str) -> Case:
    return Case(name, text, secrets, pii_replacement(cls))


RSA = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi+Z0mXn1Y4j2Q8aB7c\n"
    "dGVzdGtleWRhdGFmb3JzY3J1YmJpbmcxMjM0NTY3ODkwYWJjZGVm\n-----END RSA PRIVATE KEY-----"
)
OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBhc2RmZ2hqa2xxd2VydHl1aW9wenhjdmJubTEyMzQ1Ng==\n-----END OPENSSH PRIVATE KEY-----"
)
PGP = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\nlQOYBF0abcdEEACZ1234567890abcdefghijklmnop\n=abcd\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)
PKCS8_JSON = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
GHP = "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ"
GITHUB_PAT = "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRS"
OPENAI = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678"
OPENAI_OLD = "sk-T3BlbkFJabcdefghijklmnopqrstuv1234567890ABCD"
ANTHROPIC = "sk-ant-api03-AbCdEf123456_GhIjKl789012-MnOpQr345678"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RK = "rk_test_51HxYzAbCdEf0123456789"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
NPM = "npm_abcdefghijklmnopqrstuvwxyz0123456789"
SENDGRID = "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"
GOOGLE = "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe"
GITLAB = "glpat-xYz12AbC34dEf56GhI78"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
PYPI = "pypi-AgEIcHlwaS5vcmcCJGE4ZjY0YTY2LTY4YjEtNDk5Ny05YjMxLTk0ZTAzZjBmN2QzMQ"
SHOPIFY = "shpat_0123456789abcdef0123456789abcdef"
DO = "dop_v1_" + "0123456789abcdef" * 4
MAILGUN = "key-0123456789abcdef0123456789abcdef"
TWILIO = "SK0123456789abcdef0123456789abcdef"
SQUARE = "sq0atp-AbCdEfGhIjKlMnOpQrStUv"
TELEGRAM = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"
SLACK_HOOK = "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"

POSITIVES: tuple[Case, ...] = (
    # 1. private keys
    Case("pem rsa in prose", f"here is the deploy key:\n{RSA}\nkeep it safe", (RSA,), REDACTED_PRIVATE_KEY),
    Case("openssh in a code block", f"```\n{OPENSSH}\n```", (OPENSSH,), REDACTED_PRIVATE_KEY),
    Case("pgp block", f"My PGP key: {PGP} (do not share)", (PGP,), REDACTED_PRIVATE_KEY),
    Case(
        "pkcs8 in json",
        f'{{"private_key": "{PKCS8_JSON}\\n", "type": "service_account"}}',
        (PKCS8_JSON,),
        REDACTED_PRIVATE_KEY,
    ),
    Case(
        "ec key cut short",
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBn",
        ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBn",),
        REDACTED_PRIVATE_KEY,
    ),
    # 2. markers
    Case(
        "one-time secret url",
        "open https://onetimesecret.com/secret/x7k2m9q4w8e1r5t3 before noon",
        ("x7k2m9q4w8e1r5t3",),
    ),
    Case(
        "bearer header",
        "curl -H 'Authorization: Bearer abc123def456ghi789jkl' https://api.example.com",
        ("abc123def456ghi789jkl",),
    ),
    Case("bearer in prose", "use bearer Zm9vYmFyYmF6cXV4MTIz for the staging api", ("Zm9vYmFyYmF6cXV4MTIz",)),
    Case("basic auth header", "Authorization: Basic dXNlcjpodW50ZXIy", ("dXNlcjpodW50ZXIy",)),
    Case(
        "password in a database url",
        "DATABASE_URL=postgres://admin:s3cr3tPa55@db.example.com:5432/app",
        ("s3cr3tPa55",),
    ),
    Case("password in a redis url", "broker redis://:Tr0ub4dor3@cache.internal:6379/0", ("Tr0ub4dor3",)),
    # 3. shapes
    Case("aws access key id", "my AWS key is AKIAIOSFODNN7EXAMPLE, rotate it", ("AKIAIOSFODNN7EXAMPLE",)),
    Case("aws session key id", '{"AccessKeyId": "ASIAY34FZKBOKMUTVV7A"}', ("ASIAY34FZKBOKMUTVV7A",)),
    Case(
        "aws secret in an ini file",
        "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",),
    ),
    Case("github classic token", f"export GITHUB_TOKEN={GHP}", (GHP,)),
    Case("github fine-grained token", f"the PAT is {GITHUB_PAT}.", (GITHUB_PAT,)),
    Case("gitlab token", f"glab auth login --token {GITLAB}", (GITLAB,)),
    Case("openai project key", f'client = OpenAI(api_key="{OPENAI}")', (OPENAI,)),
    Case("openai legacy key", f"key: {OPENAI_OLD}", (OPENAI_OLD,)),
    Case("anthropic key", f"ANTHROPIC_API_KEY={ANTHROPIC}", (ANTHROPIC,)),
    Case("google api key in a url", f"https://maps.googleapis.com/maps/api/js?key={GOOGLE}&callback=init", (GOOGLE,)),
    Case("stripe live key", f"stripe.api_key = '{STRIPE}'", (STRIPE,)),
    Case("stripe restricted key", f"rotate {STRIPE_RK} tomorrow", (STRIPE_RK,)),
    Case("slack bot token", f"SLACK_BOT_TOKEN: {SLACK}", (SLACK,)),
    Case("npm token in npmrc", f"//registry.npmjs.org/:_authToken={NPM}", (NPM,)),
    Case("sendgrid key", f"sendgrid key {SENDGRID} for the mailer", (SENDGRID,)),
    Case("jwt in prose", f"the session cookie was {JWT} yesterday", (JWT,)),
    Case("jwt in json", f'{{"id_token": "{JWT}"}}', (JWT,)),
    Case("password assignment", "db password=hunter2 on staging", ("hunter2",)),
    Case(
        "password in json",
        '{"user": "ada", "password": "correct horse battery staple"}',
        ("correct horse battery staple",),
    ),
    Case("password said in prose", "my password is Tr0ub4dor&3 for the router", ("Tr0ub4dor&3",)),
    Case(
        "client secret in yaml",
        "oauth:\n  client_id: web-app\n  client_secret: 9f8e7d6c5b4a3f2e1d0c\n",
        ("9f8e7d6c5b4a3f2e1d0c",),
    ),
    Case("api key with a colon", "API-KEY: 5f2b8c1d9e7a4f3b", ("5f2b8c1d9e7a4f3b",)),
    Case(
        "api key in a python code block",
        '```python\nAPI_KEY = "a1b2c3d4e5f6g7h8"\nprint(API_KEY)\n```',
        ("a1b2c3d4e5f6g7h8",),
    ),
    Case(
        "oauth tokens in a callback url",
        "https://app.example.com/cb#access_token=ya29.a0AfH6SMBx7Yz&refresh_token=1//0gAbCdEf123&state=xyz",
        ("ya29.a0AfH6SMBx7Yz", "1//0gAbCdEf123"),
    ),
    Case(
        "pkce parameters",
        "code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk&code_challenge_method=S256",
        ("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",),
    ),
    Case("token split across lines", 'api_key:\n    "q8w7e6r5t4y3u2i1o0p9"\nregion: eu', ("q8w7e6r5t4y3u2i1o0p9",)),
    Case("secret in an env file", "SECRET=zx81spectrum48k\nDEBUG=false", ("zx81spectrum48k",)),
    Case("hugging face token", f"HF_TOKEN={HF}", (HF,)),
    Case("pypi token in pypirc", f"[pypi]\nusername = __token__\npassword = {PYPI}\n", (PYPI,)),
    Case("shopify token", f"X-Shopify-Access-Token: {SHOPIFY}", (SHOPIFY,)),
    Case("digitalocean token", f"doctl auth init -t {DO}", (DO,)),
    Case("mailgun key", f"mailgun says {MAILGUN} works", (MAILGUN,)),
    Case("twilio api key", f"twilio key sid {TWILIO}", (TWILIO,)),
    Case("square token", f"square {SQUARE}", (SQUARE,)),
    Case("telegram bot token", f"bot https://api.telegram.org/bot{TELEGRAM}/getMe", (TELEGRAM,)),
    Case("slack webhook", f"POST https://hooks.slack.com/services/{SLACK_HOOK}", (SLACK_HOOK,)),
    Case(
        "aws secret said with spaces",
        "AWS secret access key: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",),
    ),
    Case(
        "azure connection string",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=x",
        ("Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==",),
    ),
    Case("mongodb url", "mongodb+srv://app:Hx7-pL2q9Zr@cluster0.example.net/db", ("Hx7-pL2q9Zr",)),
    Case("curl user and password", "curl -u admin:Sup3rS3cret https://api.example.com", ("Sup3rS3cret",)),
    Case("password said as a word", "my password is swordfish, don't tell", ("swordfish",)),
    Case("pass with a colon", "wifi pass: hunter22", ("hunter22",)),
    Case(
        "aws key pair in json",
        '{"aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",\n'
        ' "aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}',
        ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ),
    Case("bearer token on the next line", "Authorization: Bearer\n    abc123def456ghi789", ("abc123def456ghi789",)),
    Case(
        "camel-case keys in json",
        '{"sessionToken": "AbC123xyz789", "clientSecret": "s3cr3t-v4lue"}',
        ("AbC123xyz789", "s3cr3t-v4lue"),
    ),
    Case("aws key wrapped across lines", "key AKIAIOSFOD\nNN7EXAMPLE ok", ("AKIAIOSFOD\nNN7EXAMPLE",)),
    Case("jwt wrapped in yaml", f"token:\n  {JWT[:40]}\n  {JWT[40:]}\nbye", (f"{JWT[:40]}\n  {JWT[40:]}",)),
    Case(
        "github token wrapped after a bearer",
        f"Authorization: Bearer {GHP[:20]}\n{GHP[20:]} end",
        (f"{GHP[:20]}\n{GHP[20:]}",),
    ),
    Case("zero-width space inside a key", "key AKIA\u200bIOSFODNN7EXAMPLE here", ("AKIA\u200bIOSFODNN7EXAMPLE",)),
    # 4. PII
    pii("visa with spaces", "card 4111 1111 1111 1111 exp 12/27", "4111 1111 1111 1111", cls="CARD"),
    pii("mastercard bare", "charge 5500000000000004 now", "5500000000000004", cls="CARD"),
    pii("amex with dashes", "amex 3782-822463-10005", "3782-822463-10005", cls="CARD"),
    pii("discover in json", '{"pan": "6011111111111117", "exp": "09/28"}', "6011111111111117", cls="CARD"),
    pii("card split across lines", "my card is 4111 1111\n1111 1111 thanks", "4111 1111\n1111 1111", cls="CARD"),
    pii(
        "card in full-width digits",
        "card ４１１１ １１１１ １１１１ １１１１",
        "４１１１ １１１１ １１１１ １１１１",
        cls="CARD",
    ),
    pii("jcb bare with keyword", "JCB 3530111333300000", "3530111333300000", cls="CARD"),
    pii("iban grouped", "wire it to DE89 3704 0044 0532 0130 00 by friday", "DE89 3704 0044 0532 0130 00", cls="IBAN"),
    pii(
        "iban split across lines",
        "send to DE89 3704 0044\n0532 0130 00 today",
        "DE89 3704 0044\n0532 0130 00",
        cls="IBAN",
    ),
    pii("iban compact", "IBAN: GB82WEST12345698765432", "GB82WEST12345698765432", cls="IBAN"),
    pii("iban with letters", "FR14 2004 1010 0505 0001 3M02 606 EUR", "FR14 2004 1010 0505 0001 3M02 606", cls="IBAN"),
    pii("cpf formatted", "CPF do cliente: 529.982.247-25", "529.982.247-25", cls="BR_CPF"),
    pii("cpf bare with keyword", "cpf 52998224725", "52998224725", cls="BR_CPF"),
    pii("cnpj formatted", "empresa 11.222.333/0001-81", "11.222.333/0001-81", cls="BR_CNPJ"),
    pii("cuit formatted", "CUIT 20-12345678-6", "20-12345678-6", cls="AR_CUIT"),
    pii("aadhaar grouped", "Aadhaar 2341 2341 2346 verified", "2341 2341 2346", cls="IN_AADHAAR"),
    pii("aadhaar bare with keyword", '{"aadhaar": "234123412346"}', "234123412346", cls="IN_AADHAAR"),
    pii("spanish dni", "DNI 12345678Z", "12345678Z", cls="ES_DNI"),
    pii("spanish nie", "NIE X1234567L", "X1234567L", cls="ES_NIE"),
    pii("us ssn", "SSN 536-90-4399 on file", "536-90-4399", cls="US_SSN"),
    pii("us ssn the famous example", "my SSN is 078-05-1120", "078-05-1120", cls="US_SSN"),
    pii("us ssn bare with keyword", "social security number 536904399", "536904399", cls="US_SSN"),
    pii("uk nino", "NI number AB 12 34 56 C", "AB 12 34 56 C", cls="UK_NINO"),
    pii("japan my number", "My Number: 6214 9832 0257", "6214 9832 0257", cls="JP_MY_NUMBER"),
    pii("mexico rfc", "RFC GODE561231GR8", "GODE561231GR8", cls="MX_RFC"),
    pii("india pan", "PAN ABCPE1234F", "ABCPE1234F", cls="IN_PAN"),
    pii("india pan example named", "PAN card ABCDE1234F", "ABCDE1234F", cls="IN_PAN"),
    pii("uk nino hmrc example named", "National Insurance number QQ 12 34 56 C", "QQ 12 34 56 C", cls="UK_NINO"),
    pii("korea rrn", "주민등록번호 900101-1234567", "900101-1234567", cls="KR_RRN"),
    pii("phone e164", "call me on +44 20 7946 0958", "+44 20 7946 0958", cls="PHONE"),
    pii("phone nanp", "cell (415) 555-2671, office 415.555.0199", "(415) 555-2671", "415.555.0199", cls="PHONE"),
    pii("phone in arabic-indic digits", "رقمي +٩٧١٥٠١٢٣٤٥٦٧", "+٩٧١٥٠١٢٣٤٥٦٧", cls="PHONE"),
    # gaps found in review (issue 15): a one-word password after a marker, values wrapped over a line break,
    # bare 10-digit phone numbers named as phones
    Case("password after a bare space", "my password hunter2 works on the nas", ("hunter2",)),
    Case("pw with a colon", "wifi pw: hunter2 at the cabin", ("hunter2",)),
    Case("password after a dash", "Router password — hunter2 (do not share)", ("hunter2",)),
    Case(
        "key=value wrapped across lines",
        "api_key=abc123def456\nghi789jkl012\nregion=eu",
        ("abc123def456\nghi789jkl012",),
    ),
    Case(
        "quoted value wrapped across lines", 'api_key = "abc123def4\n   56ghi789xy"\n', ("abc123def4\n   56ghi789xy",)
    ),
    Case(
        "bearer token wrapped across lines",
        "Authorization: Bearer abc123def456ghi\n789jkl012mno and the rest",
        ("abc123def456ghi\n789jkl012mno",),
    ),
    Case("a wrapped value stops before the next key", "token: abc123def456ghi\nregion=eu-west-1", ("abc123def456ghi",)),
    pii("phone bare after a phone word", "call me at 4155552671 tonight", "4155552671", cls="PHONE"),
    pii("phone bare with a country code", "my cell is 14155552671, thanks", "14155552671", cls="PHONE"),
    pii("phone bare with a label after", "numbers: 2125550143 (mobile)", "2125550143", cls="PHONE"),
    # tokens glued after a hyphen or underscore: the word before them is kept
    Case("openai key glued after a word", f"use my-{OPENAI} for the demo", (OPENAI,)),
    Case("openai key glued after an env name", f"API_KEY_{OPENAI} was in the log", (OPENAI,)),
    Case("github token glued after a hyphen", f"token-{GHP} and more", (GHP,)),
    Case("aws key glued after an underscore", "x_AKIAIOSFODNN7EXAMPLE,", ("AKIAIOSFODNN7EXAMPLE",)),
    Case("telegram bot token glued after a hyphen", f"bot a-{TELEGRAM} set", (TELEGRAM,)),
    Case(
        "glued key wrapped across lines",
        f"note my-{OPENAI[:24]}\n{OPENAI[24:]} end",
        (f"{OPENAI[:24]}\n{OPENAI[24:]}",),
    ),
    Case("glued token in a password value", f"password=hunter2-{GHP}", (f"hunter2-{GHP}",)),
)

NEGATIVES: tuple[Case, ...] = (
    Case("ring bearer", "Sam was the ring bearer at the wedding"),
    Case("bearer of bad news", "I hate to be the bearer of bad news, bearer bonds are gone"),
    Case("bearer ceremony", "The Bearer ceremony starts at noon"),
    Case("bearer and a date", "the ring bearer 2024-05-17 and the bearer 12:30 slot"),
    Case("16 digits failing luhn", "order 4111111111111112 shipped"),
    Case("order numbers", "Order #100234987 and INV-2024-000123 and PO 7781-2231"),
    Case("dates", "2024-05-17, 17/05/2024, 05.17.2024 and May 17, 2024 at 14:30"),
    Case("versions", "upgraded to v1.2.3, Python 3.11.4 and Windows 10.0.19045.3693"),
    Case("bare ten-digit id", "customer id 4155552671 opened a ticket"),
    Case("phone-like ids", "SKU 123-456-7890, ticket 2024-0517-8812, ext 5551234"),
    Case("token prose", "the token limit is 1200 tokens; set max_tokens=4096"),
    Case("password prose", "the password reset link expires in 24 hours; your password must be long"),
    Case("secret prose", "the secret to good bread is patience, and the secret is out"),
    Case("api key prose", "Enter your API key in settings, then set api_key to your key"),
    Case("placeholders", "token: <your-token-here>\npassword: ${DB_PASSWORD}\nsecret: ****"),
    Case("git sha", "commit 3f9c2a7b1e4d5f60718293a4b5c6d7e8f9012345 fixed it"),
    Case("uuid", "request 550e8400-e29b-41d4-a716-446655440000 failed"),
    Case("ip and port", "listening on 192.168.1.10:8080 and localhost:6379"),
    Case("money", "revenue was $1,234,567.89 in Q3"),
    Case("isbn", "ISBN 978-3-16-148410-0"),
    Case("plain url", "https://example.com/docs?page=2&sort=asc#intro"),
    Case("public key", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"),
    Case("prefix words", "AKIA is how AWS key ids start; sk-12 is a task id; eyJ starts base64 JSON"),
    Case("email kept", "write to ada@example.com about the invoice"),
    Case("gps", "meet at 37.7749, -122.4194"),
    Case("timestamps", "1715950800 and 2024-05-17T14:30:00Z"),
    Case("long numeric trace id", "trace 12345678901234567890123456 in the log"),
    Case("word after bearer header name", "the Authorization header carries a bearer token"),
    Case("key read from the environment", 'api_key = os.environ["OPENAI_API_KEY"]\ntoken = os.getenv("TOKEN")'),
    Case("key from settings", "client = Client(api_key=settings.API_KEY, token=self.token)"),
    Case("key passed through", "def connect(api_key=api_key, password=password, secret=None):"),
    Case("placeholders in docs", "export OPENAI_API_KEY=YOUR_API_KEY\npassword: your-password-here"),
    Case("type annotations", "class Login:\n    password: str\n    token: bytes\n    api_key: Optional[str]"),
    Case("json schema", '{"password": {"type": "string", "minLength": 12}}'),
    Case("secret santa", "Secret Santa is on Friday; the secret ingredient is love"),
    Case("key prose", "The key to success is patience; press any key; a key-value store"),
    Case("a grouped number failing luhn", "ref 1234 5678 9012 3456 attached"),
    Case("isbn-13 digits", "ISBN 9783161484100 in stock"),
    Case("iso timestamp with offset", "at 2024-05-17T10:30:00+02:00 and 2024-05-17 10:30:00"),
    Case("tracking number in groups", "USPS 9400 1000 0000 0000 0000 00 and UPS 1Z999AA10123456784"),
    Case("code testing a token", "if token is None: raise\nif password is not None and token is valid: go()"),
    Case("words ending in a key word", "monkey: banana; turkey: roast; the donkey is grey"),
    Case("long words on consecutive lines", "the configuration\ndocumentation explains\nrisk-assessment work"),
    Case("tasks and asks", "ask the task runner; a risk of SKU-42"),
    Case("password prose after is", "the password is wrong, the old password was expired; the secret is out"),
    Case("pass as a verb", "pass the salt; the pass is valid until May; boarding pass 12A"),
    Case("curl options", "curl -u $USER:$TOKEN https://x and -u admin"),
    Case("product code with letters", "part ABCDE1234F in bin 7"),
    Case("bare ids that look like phones", "order number 4155552671, invoice no. 2125551234, tracking 4155552671x"),
    Case("bare ids near a phone word", "call about order #4155552671; account 2125551234 has a phone on file"),
    Case("bare runs failing the numbering plan", "call 4115552671 or 2121115555; phone 1733097600; ISBN 0306406152"),
    Case("password after a space, not a password", "password sha256 hashing; password v1.2.3 rules; password 2fa"),
    Case("password after a dash, prose", "password - required; password - see below; step 2 - password - set it"),
    Case("a quoted value over lines is prose", 'password: "see\n the docs"'),
    Case("key then a wrapped line of prose", "token: <your-token>\n  continue with the setup"),
    Case(
        "hyphenated and underscored words and ids",
        "task-skeleton, pre_sk_value, job-20240517-0001, th-240517-1234567, x-asia-pacific, my_hf_model, "
        "use-npm_modules, risk-sk-12, build-key-value, team_eyJ_notes, ACME_SK_TOOLS",
    ),
    Case(
        "a hyphenated name the sk- shape would take", "deploy eu-sk-prod-eu-west-1-nodes and x-sk-learn-pipeline-config"
    ),
)
