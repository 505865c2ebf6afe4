"""`python -m capabilities.documents`: the documents capability server on stdio."""

from .server import main

if __name__ == "__main__":
    main()
