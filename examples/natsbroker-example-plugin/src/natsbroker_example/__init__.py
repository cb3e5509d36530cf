"""An example natsbroker plugin written against the public plugin API only
(natsbroker.interfaces, natsbroker.discovery): see README.md."""
