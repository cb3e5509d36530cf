# twistd finds the "natsbroker" command here; the options live in natsbroker.tap.
from twisted.application.service import ServiceMaker

natsbroker = ServiceMaker("natsbroker", "natsbroker.tap", "A NATS-compatible message broker", "natsbroker")
