mod oracle;
