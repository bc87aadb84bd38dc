"""A real SMTP server (aiosmtpd) for the delivery tests.

Listens on 127.0.0.1 on a free port, prints "listening <port>", then one JSON
line per accepted message: envelope, headers, the text and HTML parts and the
attachments (hex), as Python's e-mail parser sees them. Arguments are replies
(e.g. "451 4.3.0 Try again later") given instead of accepting the first
messages, in order.
"""
import asyncio
import json
import sys
from email import policy
from email.parser import BytesParser

from aiosmtpd.smtp import SMTP


class Handler:
    def __init__(self, refusals):
        self.refusals = refusals

    async def handle_DATA(self, server, session, envelope):
        if self.refusals:
            return self.refusals.pop(0)
        msg = BytesParser(policy=policy.default).parsebytes(envelope.content)
        text = msg.get_body(preferencelist=("plain",))
        html = msg.get_body(preferencelist=("html",))
        attachments = [
            {
                "filename": part.get_filename(),
                "content_type": part.get_content_type(),
                "hex": part.get_payload(decode=True).hex(),
            }
            for part in msg.iter_attachments()
        ]
        print(json.dumps({
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "from": str(msg["From"]),
            "to": str(msg["To"]),
            "subject": str(msg["Subject"]),
            "message_id": str(msg["Message-ID"]),
            "content_type": msg.get_content_type(),
            "text": text.get_content() if text is not None else None,
            "html": html.get_content() if html is not None else None,
            "attachments": attachments,
        }), flush=True)
        return "250 Message accepted for delivery"


async def main():
    loop = asyncio.get_running_loop()
    handler = Handler(sys.argv[1:])
    server = await loop.create_server(lambda: SMTP(handler), "127.0.0.1", 0)
    print("listening", server.sockets[0].getsockname()[1], flush=True)
    # Exit when the test closes our stdin (or dies).
    await loop.run_in_executor(None, sys.stdin.read)


asyncio.run(main())
